"""MLAE: "MLAE: Encoder-decoder Pretraining with Non-autoregressive Modeling" (anonymous, an ACL
submission). This docstring is the paper's map.

Files:
  model.py         the asymmetric encoder-decoder pretrained as a masked autoencoder: the encoder on
                   the unmasked tokens, decoder variants (a) and (b) (sections 3.1, 4.1, 5.2.2);
                   seq2seq- and UniLM-style fine-tuning with scheduled masking (section 3.3,
                   Algorithm 1)
  nar.py           NAR generation's model and training, shared by MLAE NAR, its T5-NAR baseline and
                   CMLM from scratch: CMLM batches, the length predictor, T5-NAR's span-corruption
                   pretraining (sections 3.4, 4.4)
  mask_predict.py  Mask-Predict decoding (Ghazvininejad et al. 2019) for every NAR model (section 4.4)

Elsewhere:
  records  core/objectives.py OBJECTIVES "mlae", "t5-nar"; core/architectures.py ARCHS "mlae-a",
           "mlae-b", "mlae-s2s", "mlae-unilm", "t5-nar", "nar"; core/decodings.py DECODINGS "nar"
  kernels  none: MLAE runs on the shared attention kernels
  claims   reproduce/orderings.py ORDERINGS "MLAE"
  docs     docs/mlae.md
  tests    tests/test_mlae.py, tests/test_nar.py, tests/test_finetune_inputs.py
"""
