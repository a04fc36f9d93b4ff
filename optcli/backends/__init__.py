"""One folder per backend (runtime): its descriptor, runner, build recipes and Triton piece.
optcli/backends/registry.py registers them and says how to add one."""
