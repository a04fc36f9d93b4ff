"""Skip padded tokens in encoders: the graph rewrite (graph.py), its proof on data (verify.py), its config."""
