"""PyTorch artifacts on a real CUDA GPU through optcli.load: a transformers encoder's .pt2 (whose graph
builds its masks on an explicit device) gives the CPU's answers, and in-process dynamic batching
gathers concurrent batch-1 requests into batches there. Skipped where torch sees no CUDA GPU."""
from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU visible to torch (torch.cuda.is_available() is False)", allow_module_level=True)

import optcli  # noqa: E402

SEQ = 16


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=128, vocab_size=500)
        self.bert = transformers.BertModel(config, add_pooling_layer=False).eval()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


@pytest.fixture(scope="module")
def encoder_pt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    torch.manual_seed(0)
    ids = torch.randint(1, 500, (2, SEQ))
    mask = torch.ones(2, SEQ, dtype=torch.int64)
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(Encoder().eval(), (ids, mask), dynamic_shapes=({0: batch}, {0: batch}), strict=False)
    path = tmp_path_factory.mktemp("cuda") / "encoder.pt2"
    torch.export.save(ep, str(path))
    return str(path)


def _feeds(rows: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.ones((rows, SEQ), dtype=np.int64)
    mask[:, SEQ // 2:] = rng.integers(0, 2, (rows, SEQ - SEQ // 2))
    return {"input_ids": rng.integers(1, 500, (rows, SEQ), dtype=np.int64), "attention_mask": mask}


def test_transformers_pt2_on_cuda_matches_the_cpu(encoder_pt2: str) -> None:
    feeds = _feeds(4, 0)
    with optcli.load(encoder_pt2) as cpu, optcli.load(encoder_pt2, device="cuda") as gpu:
        want = next(iter(cpu.predict(feeds).values()))
        got = next(iter(gpu.predict(feeds).values()))
    assert got.shape == want.shape == (4, SEQ, 64)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


def test_batching_on_cuda_gathers_concurrent_requests_and_answers_each(encoder_pt2: str) -> None:
    requests = [_feeds(1, seed) for seed in range(64)]
    with optcli.load(encoder_pt2) as cpu:
        want = [next(iter(cpu.predict(r).values())) for r in requests]
    got: list = [None] * len(requests)
    with optcli.load(encoder_pt2, device="cuda",
                     batching={"max_batch_size": 16, "max_queue_delay_microseconds": 2000}) as model:
        def client(k: int) -> None:
            for i in range(k, len(requests), 16):
                got[i] = next(iter(model.predict(requests[i]).values()))

        threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stats = model.stats()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-3)
    assert stats["rows"] == len(requests)
    assert stats["rows"] / stats["batches"] > 1, stats  # batched, not one by one
