"""AOTInductor's CPU build recipe (one module, defining RECIPE; listed in the descriptor)."""
