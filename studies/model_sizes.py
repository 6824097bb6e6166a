"""The parameters of MLAE and of the encoder-decoders compared with it, at every preset and its
depths (core/config.py DEPTHS), vocabulary 8,000: instantiated, no training.

    python -m studies.model_sizes --json results/studies/model-sizes.json

One class serves several rows of the papers' tables: `EncoderDecoder` is MLAE's AR seq2seq
fine-tuning and T5; `NARModel` (a length predictor on the encoder) is MLAE NAR, T5-NAR and CMLM.
The last two columns are what T5 and T5-NAR would weigh with the decoder as deep as the encoder.
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from core.mlae import nar  # noqa: E402
from core.config import DEPTHS, preset  # noqa: E402
from core.mlae.model import MLAE  # noqa: E402
from core.model import EncoderDecoder  # noqa: E402
from tools import records  # noqa: E402

M = "{:.2f}M"
COLUMNS = [
    ("preset", "preset", "{}"),
    ("depths", "depths", "{}"),
    ("MLAE (a)", "mlae_a", M),
    ("MLAE (b), with its cross-attention bias", "mlae_b", M),
    ("MLAE AR seq2seq, T5 (EncoderDecoder)", "seq2seq", M),
    ("MLAE NAR, T5-NAR, CMLM (NARModel)", "nar", M),
    ("T5, decoder as deep as the encoder", "t5_deep", M),
    ("T5-NAR, decoder as deep", "nar_deep", M),
]


def millions(model):
    return sum(p.numel() for p in model.parameters()) / 1e6


def sizes(name, vocab):
    enc, dec = DEPTHS[name]
    cfg = preset(name, vocab_size=vocab, n_layers=enc, n_dec_layers=dec)
    deep = preset(name, vocab_size=vocab, n_layers=enc, n_dec_layers=enc)
    return {
        "preset": name,
        "depths": f"{enc}L-{dec}L",
        "mlae_a": millions(MLAE(cfg, "a")),
        "mlae_b": millions(MLAE(cfg, "b")),
        "seq2seq": millions(EncoderDecoder(cfg)),
        "nar": millions(nar.NARModel(cfg)),
        "t5_deep": millions(EncoderDecoder(deep)),
        "nar_deep": millions(nar.NARModel(deep)),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--json", default=None, help="also write the table to this file")
    args = p.parse_args()
    rows = [sizes(name, args.vocab_size) for name in DEPTHS]
    print("\n".join(records.markdown(COLUMNS, rows)))
    if args.json:
        records.write(
            args.json,
            ["python", "-m", "studies.model_sizes", *sys.argv[1:]],
            COLUMNS,
            rows,
            note=f"Vocabulary {args.vocab_size:,}.",
        )


if __name__ == "__main__":
    main()
