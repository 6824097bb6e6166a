"""The model and everything it needs: config, tokenizer, data, masking layouts, checkpoints; one
folder per paper (unilm/, mlae/, elmer/), whose __init__.py is that paper's map, beside the shared
parts and the T5 baseline (t5.py)."""
