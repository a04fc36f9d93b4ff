"""Small sample models (a CNN and a tiny BERT) for optcli demos and tests."""
