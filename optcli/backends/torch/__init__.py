"""PyTorch: runs a saved model as it is (.pt2 from torch.export, TorchScript): the eager baseline."""
from optcli.backends.registry import Backend

_HERE = "optcli.backends.torch"

BACKEND = Backend(
    name="torch",
    label="PyTorch",
    formats=("pt2", "torchscript"),
    suffixes=(".pt2", ".pt", ".pth", ".ts", ".jit", ".torchscript"),
    format_of=f"{_HERE}.files:format_of",
    package="torch",
    extra="cpu",
    runner=f"{_HERE}.runner:TorchFileRunner",
    shapeless=("torchscript",),
)
