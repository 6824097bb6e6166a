"""The model and everything it needs: config, tokenizer, data, masking layouts, checkpoints."""
