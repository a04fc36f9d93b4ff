"""ONNX Runtime's CPU build recipes, one per module (each defines RECIPE); listed in the descriptor."""
