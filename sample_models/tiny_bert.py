"""A tiny BERT-style encoder written from scratch, trained on a synthetic counting task.

Inputs ``input_ids`` and ``attention_mask``: int64, N x 64 (pad id 0, mask 0 on padding; the
first token is CLS_ID). Output: logits, N x 2. Label 1 means tokens from [10, 60) outnumber
tokens from [60, 110) in the sequence.

Attention is explicit matmul + softmax with an additive mask bias (like the original BERT code),
not scaled_dot_product_attention, so exporters see the classic attention pattern.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NAME = "tiny_bert"
INPUT_NAMES = ("input_ids", "attention_mask")  # forward() parameter names, in order
VOCAB_SIZE = 1000
SEQ_LEN = 64
HIDDEN = 128
NUM_LAYERS = 4
NUM_HEADS = 4
FFN = 512
NUM_CLASSES = 2
PAD_ID = 0
CLS_ID = 1
SET_A = (10, 60)   # label 1 when these tokens outnumber ...
SET_B = (60, 110)  # ... these
OTHER = (110, VOCAB_SIZE)
MIN_LEN = 8  # tokens including CLS
MASK_BIAS = -1e4  # BERT's additive mask value; finite so fp16 stays safe

TRAIN_STEPS = 200
BATCH_SIZE = 64
LR = 2e-3
TEST_SAMPLES = 1024
TEST_SEED_OFFSET = 1_000_003  # the test set never shares a seed with the training stream
# Calibration/eval sets (see calibration_sets): seeds distinct from training and test.
CALIB_SEED = 1234
EVAL_SEED = 5678
CALIB_SAMPLES = 128
EVAL_SAMPLES = 256


def make_batch(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n random sequences -> (input_ids int64 n x 64, attention_mask int64 n x 64, labels int64 n).

    Each sequence draws a high rate for one of the two sets (chosen at random) and a low rate for
    the other, so the count difference is usually clear-cut and a tiny model learns it in a few
    hundred steps; the label is still computed from the actual counts, so near-ties do occur.
    """
    lengths = rng.integers(MIN_LEN, SEQ_LEN + 1, size=n)
    high = rng.uniform(0.2, 0.45, size=n)
    low = rng.uniform(0.02, 0.15, size=n)
    a_wins = rng.random(n) < 0.5
    rate_a = np.where(a_wins, high, low)[:, None]
    rate_b = np.where(a_wins, low, high)[:, None]
    u = rng.random((n, SEQ_LEN))
    pick_a = u < rate_a
    pick_b = (u >= rate_a) & (u < rate_a + rate_b)
    ids = rng.integers(*OTHER, size=(n, SEQ_LEN))
    ids = np.where(pick_a, rng.integers(*SET_A, size=(n, SEQ_LEN)), ids)
    ids = np.where(pick_b, rng.integers(*SET_B, size=(n, SEQ_LEN)), ids)
    ids[:, 0] = CLS_ID
    mask = (np.arange(SEQ_LEN)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, ids, PAD_ID).astype(np.int64)
    body = ids[:, 1:]
    n_a = ((body >= SET_A[0]) & (body < SET_A[1])).sum(1)
    n_b = ((body >= SET_B[0]) & (body < SET_B[1])).sum(1)
    return ids, mask, (n_a > n_b).astype(np.int64)


def calibration_sets() -> dict[str, dict[str, np.ndarray]]:
    """{"calib": {"input_ids", "attention_mask"}, "eval": {..., "labels"}} from fixed seeds."""
    ids, mask, _ = make_batch(CALIB_SAMPLES, np.random.default_rng(CALIB_SEED))
    e_ids, e_mask, e_labels = make_batch(EVAL_SAMPLES, np.random.default_rng(EVAL_SEED))
    return {
        "calib": {"input_ids": ids, "attention_mask": mask},
        "eval": {"input_ids": e_ids, "attention_mask": e_mask, "labels": e_labels},
    }


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        # N x L x H -> N x heads x L x head_dim; -1 keeps the batch dim symbolic when traced.
        return t.view(-1, t.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def forward(self, h: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(h)), self._split(self.key(h)), self._split(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + mask_bias, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(-1, h.shape[1], h.shape[2])
        return self.out(ctx)


class EncoderLayer(nn.Module):
    """Post-LN like BERT: h = LN(h + Attn(h)); h = LN(h + FFN(h))."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ln1 = nn.LayerNorm(hidden, eps=1e-12)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, h: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        h = self.ln1(h + self.attn(h, mask_bias))
        return self.ln2(h + self.ffn_out(self.act(self.ffn_in(h))))


class TinyBert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB_SIZE, HIDDEN)
        self.pos_emb = nn.Embedding(SEQ_LEN, HIDDEN)
        self.emb_ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(SEQ_LEN)[None, :], persistent=False)
        self.layers = nn.ModuleList(
            EncoderLayer(HIDDEN, NUM_HEADS, FFN) for _ in range(NUM_LAYERS)
        )
        self.pooler = nn.Linear(HIDDEN, HIDDEN)
        self.classifier = nn.Linear(HIDDEN, NUM_CLASSES)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        h = self.tok_emb(input_ids) + self.pos_emb(self.position_ids[:, :seq_len])
        h = self.emb_ln(h)
        # N x 1 x 1 x L additive bias: 0 on real tokens, MASK_BIAS on padding.
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(h.dtype)) * MASK_BIAS
        for layer in self.layers:
            h = layer(h, mask_bias)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return self.classifier(pooled)


def example_inputs(batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random model args (export with batch >= 2: a batch of 1 lets exporters specialise the
    batch dim)."""
    ids, mask, _ = make_batch(batch, np.random.default_rng(seed))
    return torch.from_numpy(ids), torch.from_numpy(mask)


@torch.no_grad()
def accuracy(model: nn.Module, ids: np.ndarray, mask: np.ndarray, labels: np.ndarray) -> float:
    model.eval()
    pred = model(torch.from_numpy(ids), torch.from_numpy(mask)).argmax(1).numpy()
    return float((pred == labels).mean())


def _length_bucketed_batches(
    rng: np.random.Generator, chunk: int = 8
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Endless training batches, each cropped to its longest sequence.

    Sequences are drawn `chunk` batches at a time and sorted by length, so padding (and ~40% of
    the compute) is skipped while the length distribution stays that of make_batch.
    """
    while True:
        ids, mask, labels = make_batch(BATCH_SIZE * chunk, rng)
        order = np.argsort(mask.sum(1), kind="stable")
        for b in rng.permutation(chunk):
            idx = order[b * BATCH_SIZE : (b + 1) * BATCH_SIZE]
            width = int(mask[idx].sum(1).max())
            yield (
                torch.from_numpy(ids[idx, :width]),
                torch.from_numpy(mask[idx, :width]),
                torch.from_numpy(labels[idx]),
            )


def train(seed: int = 0) -> tuple[TinyBert, float]:
    """Train on a synthetic stream, deterministic per seed; returns (model.eval(), test accuracy)."""
    torch.set_num_threads(2)
    torch.manual_seed(seed)
    model = TinyBert()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=LR, total_steps=TRAIN_STEPS, pct_start=0.1
    )
    model.train()
    batches = _length_bucketed_batches(np.random.default_rng(seed))
    for _ in range(TRAIN_STEPS):
        ids, mask, labels = next(batches)
        loss = F.cross_entropy(model(ids, mask), labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    test = make_batch(TEST_SAMPLES, np.random.default_rng(seed + TEST_SEED_OFFSET))
    return model.eval(), accuracy(model, *test)


if __name__ == "__main__":
    t0 = time.perf_counter()
    _, acc = train()
    print(f"{NAME}: test accuracy {acc:.4f} in {time.perf_counter() - t0:.1f} s")
