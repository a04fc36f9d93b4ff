"""Calibration data: the reader protocol, built-in readers, plugin lookup, validation."""
