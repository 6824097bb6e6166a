"""Model configuration: one dataclass, named presets.

`tiny` is for tests (seconds on a CPU), `small` for a CPU demo in minutes, `base` for the papers'
size (768 wide, 12 heads, 3072 FFN, 12 layers; UniLMv2 Table 7, MLAE 12L-4L, ELMER 6L-6L).
"""

from dataclasses import asdict, dataclass, fields, replace


@dataclass
class ModelConfig:
    vocab_size: int = 8000
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    n_layers: int = 4  # the encoder, or the single stack of a unified (UniLM) model
    n_dec_layers: int = 0  # > 0 makes an encoder-decoder
    max_positions: int = 512  # absolute position embeddings
    n_segments: int = 2
    dropout: float = 0.1
    rel_pos: bool = True  # T5-style relative position bias (UniLMv2 uses it)
    rel_buckets: int = 32
    rel_max_distance: int = 128
    pad_id: int = 0
    # how an encoder-decoder's encoder reads its source, as its pretraining laid out its text: after
    # [SOS] (MLAE, and a PMLM/MLM stack as encoder), with the first segment's embedding (PMLM/MLM)
    enc_sos: bool = False
    enc_segment: bool = False
    # a NAR fine-tuning's cross-attention position bias (core/mlae/nar.py, CROSS_ANCHORS): "none" drops a
    # pretrained cross table, "proportional" keeps it with target token i anchored at i/T of the source
    cross_anchor: str = "none"

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of n_heads {self.n_heads}")

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, d):
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


PRESETS = {
    "tiny": dict(d_model=64, n_heads=2, d_ff=128, n_layers=2, max_positions=256),
    "small": dict(d_model=256, n_heads=4, d_ff=1024, n_layers=4, max_positions=512),
    "base": dict(d_model=768, n_heads=12, d_ff=3072, n_layers=12, max_positions=512),
}


# (encoder, decoder) layers of every encoder-decoder baseline compared with MLAE: MLAE itself, T5,
# T5-NAR and CMLM from scratch, and the random decoder of the RoBERTa baseline. The MLAE paper's
# base model is 12L-4L and its T5 baseline too (section 4.1), so that no comparison is one of
# depth; at `small` 4L-2L (the encoder as deep as the MLM baseline's stack), at `tiny` 2L-1L.
DEPTHS = {"tiny": (2, 1), "small": (4, 2), "base": (12, 4)}


def depths(model, enc_layers=None, dec_layers=None):
    """(encoder, decoder) layers at preset `model`, each DEPTHS' unless given."""
    enc, dec = DEPTHS[model]
    return enc_layers or enc, dec_layers or dec


def decoder_depth(enc_layers):
    """The decoder depth that goes with an encoder of `enc_layers` (DEPTHS; a third otherwise)."""
    return {e: d for e, d in DEPTHS.values()}.get(enc_layers, max(1, enc_layers // 3))


def preset(name, **overrides):
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; pick one of {sorted(PRESETS)}")
    return replace(ModelConfig(**PRESETS[name]), **overrides)
