"""Keep torch's compilers quiet: Inductor, torch.export and torchao log warnings (deprecations,
torchao's CUDA kernels that a CPU build cannot load) and print through `warnings`; a library must
not. What they said is kept for --debug in the captured records."""
from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator

from optcli.library_logs import captured_logs


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Capture torch's and torchao's logs, Python warnings and stdout/stderr writes."""
    buf = io.StringIO()
    with captured_logs("torch", "torchao"), warnings.catch_warnings(), \
            contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        warnings.simplefilter("ignore")
        yield buf
