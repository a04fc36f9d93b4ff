"""Benchmarks of compiled artifacts: inputs, the batch x concurrency sweep and performance baselines
(opening an artifact is optcli/loaded_model.py's). Named `benchmark`, not `bench`, so that `optcli.bench`
stays the API function."""
