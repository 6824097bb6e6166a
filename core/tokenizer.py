"""SentencePiece tokenizer with the project's reserved ids, trained on the pretraining text.

Reserved ids, the same in every model: 0 <pad>, 1 <unk>, 2 [SOS], 3 [EOS], 4 [MASK] (the
conventional mask of UniLMv2 / MLAE / ELMER), 5 [P] (UniLMv2's pseudo mask), then N_SENTINELS
sentinels <extra_id_i> for T5-style span corruption. All of them are control symbols: user text
that spells "[P]" or "<extra_id_0>" is ordinary text. Byte fallback (the next 256 ids) spells a
character the vocabulary lacks ('&', 'å', ...) as its UTF-8 bytes, so decoding gives it back.
The trained model travels inside every checkpoint as bytes (a uint8 tensor, so checkpoints load
with weights_only=True); a checkpoint made before byte fallback keeps its own tokenizer.
"""

import hashlib
import io
import os

import sentencepiece as spm
import torch

from .errors import UserError

PAD, UNK, SOS, EOS, MASK, PSEUDO = 0, 1, 2, 3, 4, 5
N_SENTINELS = 64
FIRST_SENTINEL = 6
N_BYTES = 256  # byte-fallback pieces <0x00> .. <0xFF>, after the reserved ids
FORMAT = "control-symbols+byte-fallback"  # part of the cache key: files of an older format are not reused


class Tokenizer:
    pad_id, unk_id, sos_id, eos_id, mask_id, pseudo_id = PAD, UNK, SOS, EOS, MASK, PSEUDO

    def __init__(self, proto: bytes, origin="this tokenizer"):
        self.proto = proto
        try:
            self.sp = spm.SentencePieceProcessor(model_proto=proto)
        except (RuntimeError, TypeError, ValueError):
            raise UserError(f"{origin} is not a SentencePiece model") from None
        reserved = {
            "<pad>": PAD,
            "<unk>": UNK,
            "[SOS]": SOS,
            "[EOS]": EOS,
            "[MASK]": MASK,
            "[P]": PSEUDO,
            **{f"<extra_id_{i}>": FIRST_SENTINEL + i for i in range(N_SENTINELS)},
        }
        wrong = [
            f"{piece}={i}"
            for piece, i in reserved.items()
            if i >= self.sp.get_piece_size() or self.sp.id_to_piece(i) != piece
        ]
        if wrong:
            raise UserError(
                f"{origin} lacks the project's reserved ids (needs {', '.join(wrong[:4])}"
                f"{', ...' if len(wrong) > 4 else ''}); train one with train.py"
            )

    # --- the vocabulary -------------------------------------------------------------------------
    @property
    def vocab_size(self):
        return self.sp.get_piece_size()

    @property
    def n_special(self):
        return FIRST_SENTINEL + N_SENTINELS

    def sentinel(self, i):
        if not 0 <= i < N_SENTINELS:
            raise ValueError(f"sentinel {i} out of range (0..{N_SENTINELS - 1})")
        return FIRST_SENTINEL + i

    # --- text <-> ids ---------------------------------------------------------------------------
    def encode(self, texts):
        """list[str] -> list[list[int]] (no [SOS]/[EOS] added)."""
        return self.sp.encode(list(texts))

    def decode(self, ids):
        """list[int] -> str; stops at the first [EOS], drops pad and other special ids."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i >= self.n_special:
                out.append(i)
        return self.sp.decode(out)

    # --- storage --------------------------------------------------------------------------------
    def to_tensor(self):
        return torch.frombuffer(bytearray(self.proto), dtype=torch.uint8).clone()

    @classmethod
    def from_tensor(cls, t):
        return cls(bytes(t.cpu().numpy().tobytes()))

    @classmethod
    def load(cls, path):
        if not os.path.isfile(path):
            raise UserError(f"tokenizer file not found: {path}")
        with open(path, "rb") as f:
            return cls(f.read(), path)

    @classmethod
    def train(cls, texts, vocab_size, max_sentences=300_000):
        if vocab_size <= FIRST_SENTINEL + N_SENTINELS + N_BYTES + 100:
            raise UserError(
                f"--vocab-size {vocab_size} is too small: {FIRST_SENTINEL + N_SENTINELS} ids are reserved "
                f"and {N_BYTES} hold the byte fallback (at least "
                f"{FIRST_SENTINEL + N_SENTINELS + N_BYTES + 101})"
            )
        out = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=training_sentences(texts),
                model_writer=out,
                vocab_size=vocab_size,
                model_type="unigram",
                character_coverage=0.9995,
                pad_id=PAD,
                unk_id=UNK,
                bos_id=SOS,
                eos_id=EOS,
                pad_piece="<pad>",
                unk_piece="<unk>",
                bos_piece="[SOS]",
                eos_piece="[EOS]",
                # control symbols, not user-defined ones: text that reads "[P]" or "<extra_id_0>"
                # is encoded as ordinary characters, never as the ids the objectives reserve
                control_symbols=["[MASK]", "[P]"] + [f"<extra_id_{i}>" for i in range(N_SENTINELS)],
                byte_fallback=True,  # a character outside the vocabulary becomes its UTF-8 bytes, not <unk>
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                max_sentence_length=1 << 16,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
        except RuntimeError as e:  # e.g. a vocabulary larger than the text can support
            raise UserError(f"tokenizer training failed: {e}; try a smaller --vocab-size") from None
        return cls(out.getvalue())


def training_sentences(texts, longest=4096):
    """The tokenizer trainer's input: SentencePiece silently drops a sentence past its
    max_sentence_length, so a long document (a 100k-character line) is fed in pieces cut at
    spaces; the documents themselves stay whole."""
    for t in texts:
        while len(t) > longest:
            cut = t.rfind(" ", 0, longest)
            cut = cut if cut > 0 else longest
            yield t[:cut]
            t = t[cut:].lstrip()
        if t.strip():
            yield t


def tokenizer_path(texts, vocab_size, cache_dir):
    """Where the tokenizer of (texts, vocab size) is cached."""
    h = hashlib.sha1(f"{vocab_size}|{N_SENTINELS}|{FORMAT}".encode())
    for t in texts:
        h.update(t.encode())
    return os.path.join(cache_dir, f"spm-{vocab_size}-{h.hexdigest()[:12]}.model")


def cached_tokenizer(texts, vocab_size, cache_dir, say=None):
    """Train once per (text, vocab size); later runs load the file. Written atomically. say: told
    before a training starts (it takes about a minute on the embedded corpus)."""
    path = tokenizer_path(texts, vocab_size, cache_dir)
    if os.path.exists(path):
        return Tokenizer.load(path), path
    if say:
        say(
            f"tokenizer: training a {vocab_size}-piece SentencePiece model on {len(texts)} texts (about a minute "
            f"for the embedded corpus; cached in {cache_dir} for later runs)"
        )
    tok = Tokenizer.train(texts, vocab_size)
    os.makedirs(cache_dir, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(tok.proto)
    os.replace(tmp, path)
    return tok, path
