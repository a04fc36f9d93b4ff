"""In-process batching over the PyTorch runner (tests/unit/test_batching.py covers ONNX Runtime):
its normalized inputs are torch tensors and it records no output shapes."""
from __future__ import annotations

import numpy as np

import optcli


def test_batched_torch_runner(cnn_pt2, torch_mod):
    """The PyTorch runner's normalized inputs are torch tensors: merged with torch.cat."""
    x = np.random.default_rng(3).standard_normal((6, 3, 16, 16)).astype(np.float32)
    with optcli.load(cnn_pt2) as plain:
        want = list(plain.predict(x).values())[0]
    with optcli.load(cnn_pt2, batching={"max_batch_size": 6, "max_queue_delay_microseconds": 20000}) as m:
        futures = [m.predict_async(x[i:i + 1]) for i in range(6)]
        got = np.concatenate([np.asarray(list(f.result(timeout=60).values())[0]) for f in futures])
        assert m.stats()["histogram"] == {6: 1}
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-5)
