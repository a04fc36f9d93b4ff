"""The optcli version, in one module that imports nothing (pyproject.toml repeats it for the build)."""
__version__ = "0.1.0"
