"""Which PyTorch format a saved file is: .pt2 by its suffix, the others (TorchScript, or a pickle that
optcli refuses to run) by reading the archive."""
from __future__ import annotations

from pathlib import Path

from optcli.errors import UsageError


def format_of(path: Path) -> str:
    """pt2 | torchscript; UsageError for a pickled module (loading it runs arbitrary code)."""
    if path.suffix.lower() == ".pt2":
        return "pt2"
    from optcli.backends.torch.loader import detect

    fmt = detect(str(path), allow_pickle=True).format
    if fmt == "pickle":
        raise UsageError(f"{path} is a pickled module; loading it runs arbitrary code",
                         hint="save it with torch.export.save as .pt2, or torch.jit.save as TorchScript")
    return fmt
