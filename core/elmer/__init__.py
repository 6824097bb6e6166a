"""ELMER: "ELMER: A Non-Autoregressive Pre-trained Language Model for Efficient and Effective Text
Generation" (Li et al., EMNLP 2022, https://arxiv.org/abs/2210.13304). This docstring is the paper's
map.

Files:
  model.py          the NAR encoder-decoder whose tokens exit the decoder at different layers: the
                    off-ramps (section 4.1, Eq. 7-8), early exit by gather / scatter, the LPLM loss
                    (4.2) and the hard / soft exit fine-tuning losses (4.3)
  lplm.py           LPLM's pretraining data: sentence shuffling, text infilling and k exit-layer
                    assignments per sequence (section 4.2, "Pre-training Tasks")
  exit_measures.py  when a token exits: the off-ramp's entropy (section 4.3, Eq. 10) and CALM's
                    state and classifier measures
  exit_decode.py    decoding with early exit, what the exits cost, and the output's clean-up (the
                    first [EOS] ends it, repeats merged: section 4.1)
  exit_pass.py      the same decoding at static shapes, as CUDA graphs on a GPU

Elsewhere:
  records  core/objectives.py OBJECTIVES "elmer"; core/architectures.py ARCHS "elmer";
           core/decodings.py DECODINGS "elmer"
  kernels  kernels/early_exit.py (active index, gather / scatter, the fused off-ramp; its test
           tests/test_early_exit.py), kernels/offramp_loss.py (the off-ramp's loss with the exit's
           statistics)
  claims   reproduce/orderings.py ORDERINGS "ELMER"
  docs     docs/elmer.md
  tests    tests/test_elmer.py, tests/test_exit_measures.py, tests/test_exit_pass.py
"""
