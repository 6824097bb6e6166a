"""UniLMv2: "UniLMv2: Pseudo-Masked Language Models for Unified Language Model Pre-Training" (Bao et
al., ICML 2020, https://arxiv.org/abs/2002.12804). This docstring is the paper's map.

Files:
  pmlm.py         the pseudo-masked LM: the input layout of the AE part and each factorization step,
                  the AE and PAR losses (sections 3.1-3.3), blockwise masking's 80/10/10 corruption
                  (4.1), the ablations' losses "ae", "par", "ae+par" (4.6; "ae" is RoBERTa's MLM)
  seq2seq.py      seq2seq fine-tuning with pseudo masks, and its step decoder with a key/value cache
                  (section 3.4)
  static_beam.py  that step decoder in the beam search at fixed shapes of core/static_beam.py (one
                  CUDA graph a step)

Elsewhere:
  records  core/objectives.py OBJECTIVES "pmlm", "mlm"; core/architectures.py ARCHS "unilm";
           core/decodings.py DECODINGS "ar" (beam search, shared with T5 and MLAE)
  kernels  kernels/pseudo_attention.py (the pseudo-mask attention in Triton, forward and backward),
           kernels/reference.py (the attention rule of section 3.2, readable)
  claims   reproduce/orderings.py ORDERINGS "UniLMv2", "UniLMv2 4.6"
  docs     docs/unilmv2.md
  tests    tests/test_masking.py, tests/test_seq2seq.py, tests/test_attention_rule.py,
           tests/test_static_beam.py
"""
