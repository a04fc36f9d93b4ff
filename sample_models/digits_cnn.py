"""A small Conv-BN-ReLU CNN trained on scikit-learn's bundled digits (no download).

Input ``x``: N x 1 x 32 x 32 float32, made by :func:`preprocess` (8x8 -> 32x32 bilinear, then
normalised with MEAN/STD). Output: logits, N x 10.
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NAME = "digits_cnn"
INPUT_NAMES = ("x",)  # forward() parameter names, in order
IMAGE_SIZE = 32
NUM_CLASSES = 10
# Mean/std of the training split after scaling pixels to [0, 1] and upsampling to 32x32.
MEAN = 0.3058
STD = 0.3242
TEST_SIZE = 0.25
SPLIT_SEED = 0
EPOCHS = 6
BATCH_SIZE = 64
LR = 3e-3
# Calibration/eval sets (see calibration_sets): fixed, independent of the training seed.
CALIB_SEED = 1234
CALIB_SAMPLES = 128
EVAL_SAMPLES = 256


def preprocess(images: np.ndarray) -> np.ndarray:
    """Raw digits images (N x 8 x 8, values 0..16) -> model input (N x 1 x 32 x 32 float32)."""
    x = torch.from_numpy(np.asarray(images, dtype=np.float32) / 16.0)[:, None]
    x = F.interpolate(x, size=(IMAGE_SIZE, IMAGE_SIZE), mode="bilinear", align_corners=False)
    return ((x - MEAN) / STD).numpy().astype(np.float32)


def build_dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Preprocessed (x_train, y_train, x_test, y_test); x float32 N x 1 x 32 x 32, y int64."""
    # Imported here so that loading the model class does not need scikit-learn.
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.images, digits.target, test_size=TEST_SIZE, random_state=SPLIT_SEED
    )
    return (
        preprocess(x_train),
        y_train.astype(np.int64),
        preprocess(x_test),
        y_test.astype(np.int64),
    )


def calibration_sets() -> dict[str, dict[str, np.ndarray]]:
    """{"calib": {"x"}, "eval": {"x", "labels"}}: 128 training images picked with CALIB_SEED and
    the first 256 test-split images, preprocessed exactly like the model input."""
    x_train, _, x_test, y_test = build_dataset()
    rng = np.random.default_rng(CALIB_SEED)
    idx = np.sort(rng.choice(len(x_train), CALIB_SAMPLES, replace=False))
    return {
        "calib": {"x": x_train[idx]},
        "eval": {"x": x_test[:EVAL_SAMPLES], "labels": y_test[:EVAL_SAMPLES]},
    }


def _block(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),  # bias is redundant before BN
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class DigitsCNN(nn.Module):
    """Three Conv-BN-ReLU + max-pool stages (32, 64, 128 channels), GAP, Linear."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _block(1, 32), nn.MaxPool2d(2),    # 32 -> 16
            _block(32, 64), nn.MaxPool2d(2),   # 16 -> 8
            _block(64, 128), nn.MaxPool2d(2),  # 8 -> 4
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


def example_inputs(batch: int = 2) -> tuple[torch.Tensor]:
    """The first `batch` test images as model args (export with batch >= 2: a batch of 1 lets
    exporters specialise the batch dim)."""
    _, _, x_test, _ = build_dataset()
    return (torch.from_numpy(x_test[:batch]),)


@torch.no_grad()
def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    model.eval()
    pred = model(torch.from_numpy(x)).argmax(1).numpy()
    return float((pred == y).mean())


def train(seed: int = 0) -> tuple[DigitsCNN, float]:
    """Train from scratch, deterministic per seed; returns (model.eval(), test accuracy)."""
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = build_dataset()
    xt, yt = torch.from_numpy(x_train), torch.from_numpy(y_train)
    model = DigitsCNN()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=1e-4)
    steps = EPOCHS * ((len(xt) + BATCH_SIZE - 1) // BATCH_SIZE)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=steps)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(EPOCHS):
        model.train()
        for idx in torch.randperm(len(xt), generator=gen).split(BATCH_SIZE):
            loss = F.cross_entropy(model(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return model.eval(), accuracy(model, x_test, y_test)


if __name__ == "__main__":
    t0 = time.perf_counter()
    _, acc = train()
    print(f"{NAME}: test accuracy {acc:.4f} in {time.perf_counter() - t0:.1f} s")
