"""Benchmarks of compiled artifacts: opening any artifact, inputs, the batch x concurrency sweep and
performance baselines. Named `benchmark`, not `bench`, so that `optcli.bench` stays the API function."""
