"""Checkpoints: written atomically from the raw module, read with weights_only=True.

A checkpoint is a dict: format, kind (what produced it, e.g. "pretrain/pmlm"), model (state
dict), model_config, args, step, data (loader state), optimizer, rng, tokenizer (uint8 tensor).
"""
import json
import os
import pickle
import zipfile

import torch

from .errors import UserError

FORMAT = "textgen-ckpt-1"


def save(path, state, config_json=None):
    """torch.save to a temporary file, then rename: a crash never leaves half a checkpoint.
    config_json (a dict) is also written next to it as config.json."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(dict(state, format=FORMAT), tmp)
    os.replace(tmp, path)
    if config_json is not None:
        cfg = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
        with open(cfg + ".tmp", "w") as f:
            json.dump(config_json, f, indent=2)
        os.replace(cfg + ".tmp", cfg)


def load(path, kinds=None):
    """Read and validate a checkpoint; `kinds` (a tuple of prefixes) is what the caller can use."""
    if os.path.isdir(path):
        path = os.path.join(path, "last.pt")
    if not os.path.exists(path):
        raise UserError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path} is not a readable checkpoint ({first})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise UserError(f"{path} is not a checkpoint of this project (no '{FORMAT}' tag)")
    if kinds is not None and not str(state.get("kind", "")).startswith(tuple(kinds)):
        raise UserError(f"{path} is a {state.get('kind')!r} checkpoint; this needs one of {list(kinds)}")
    return state
