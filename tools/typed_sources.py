"""Where each number typed in the docs comes from: per document, the number as typed -> its source
(the kinds: tools/source_kinds.py; the check: python -m tools.typed_numbers).

A key is the number as typed ("5.4M", "62,588", "0.62x"), or "NUMBER @ words" where one document
types it with two meanings: the pin of the occurrence that these words, which hold it, surround on
its line (code spans blanked). Editing a typed number means editing its pin here.
"""

import math

import numpy as np

from tools.source_kinds import (
    Field,
    Paper,
    Word,
    compiled_more,
    corpus,
    corpus_size,
    eager_step,
    entropy_exit_cost,
    entropy_floor,
    lplm_steps,
    mean_words,
    offramp_chunk,
    split,
    summary_words,
    value,
)


def default(flag):
    """A flag's default, as tools/defaults.py writes them: default("finetune.py --epochs")."""
    return Field("results/defaults.json", f"defaults/{flag}")


ONE = Word("a one that names, not measures: a batch of one, the first layer, a ratio's 1, one process")
CPU_DEFAULT, BUDGET = "results/cpu-default/", "results/cpu-budget/results.json"
H200_28 = "results/h200-2026-11-28/"
UNILM41 = Paper("UniLMv2 4.1: 80% [MASK], 10% random, 10% kept")
H200_26, H200_26L, H200_27 = "results/h200-2026-11-26/", "results/h200-2026-11-26-late/", "results/h200-2026-11-27/"
AOT_39 = "results/aot/sm90a-triton-3.9.json"
# the first layer (with the start), the finish and one read of the stop flag, each its GPU ms
FIRST_FINISH_READ = [
    Field(H200_27 + "call1/exit.log", k, after=k)
    for k in ("| start and layer 1 |", "| finish |", "| host read of the stop flag |")
]
TFLOPS_TARGET = "s2s-2k D128: forward TFLOP"  # /s on computed tiles
OURS_8000, CHAIN_8000 = "profile, V 8000 N 4096, chunk 2048, ours", "profile, V 8000 N 4096, chunk 2048, torch"
EXIT_26 = "results/h200-2026-11-26/exit.json"
COPY_RUNS = "3-layer decoder, V 97, 30 and 60 steps"
LOOP_BOUNDS = Field("tests/test_compile.py", "LOOP_BOUNDS = ")  # SASS per loop against its bounds
SMALL_WIDTH = Field("core/config.py", '"small": dict(d_model=', after="d_model=")
TINY_TRAIN = Field("reproduce/execute.py", '(("train", 96)', after='"train",')  # the tiny budget's pairs
TINY_BATCH = Field("reproduce/plan.py", "--epochs {epochs} --batch ", after="--batch")
SMALL_STEPS_WAS = Field("reproduce/plan.py", 'model="small", steps=', at="f6488a2", after="steps=")  # before b6bbadd
UNILM_ALG1 = Paper("UniLMv2 Algorithm 1: spans of 2-6 tokens with probability 0.4")
UNILM_XSUM = Paper("UniLMv2 appendix D and Table 10: 7e-5 after 6e-4, 14 epochs on XSum")
LAG0_NOBODY = "masked, nobody leaves early, graphs, stop flag read at once (lag 0)"
ALL_AT_1 = "masked, every token leaves at layer 1, graphs"

SOURCES = {
    "README.md": {
        "5.4M": Field(CPU_DEFAULT + "eval.json", "params_M"),
        "7.5M": Field(BUDGET, "runs/sum-mlae-none/metrics/params_M"),
        "12": Field(CPU_DEFAULT + "run.json", "pretrain-log.jsonl/seconds", div=60),
        "169": Field(BUDGET, "pretraining/pre-elmer/seconds", div=60),
        "1e-3": default("finetune.py --lr"),
        "2020": Paper("UniLMv2: Bao et al., ICML 2020"),
        "2022": Paper("ELMER: Li et al., EMNLP 2022"),
        "3.10": Field("pyproject.toml", "requires-python"),
        "2.4": Field("requirements.txt", "torch>="),
        "3.11": Field(BUDGET, "environment"),
        "2.13.0": Field(".ci/run", "torch=="),
        "3.12": Field(H200_28 + "call1/step.json", "python"),
        "2.11.0": Field(H200_28 + "call1/step.json", "torch"),
        "3.6.0": Field(H200_28 + "call1/step.json", "triton"),
        "8": Field("bench/gpu_check.py", "BUDGET, ALL_BUDGET = ", after="540.0,", div=60),  # --part all, minutes
        "400": default("train.py --steps"),
        "8,192": default("train.py --batch-tokens"),
        "50": default("train.py --eval-every"),
        "2": Field(CPU_DEFAULT + "RUN.md", "2-core CI-like machine"),
        "3": default("finetune.py --epochs"),
        "800": SMALL_STEPS_WAS,  # the plan before b6bbadd
        "1": ONE,
        "1%": Field("tests/test_dtype.py", "assert worst <"),
        "2.03x": Field("results/studies/dtype.json", "rows/dtype=bfloat16/ratio"),
        "80": UNILM41,
        "62,588": corpus_size,
    },
    "bench/RESULTS.md": {
        "1": ONE,
        "0": Word("lag 0: the stop flag read at once"),
        "64k": Field("bench/bench_step.py", '"--tokens"'),
        "16 @ 16 x 512": Field("bench/profile_step.py", "def make_step("),
        "512": Field("bench/profile_step.py", "def make_step("),
        "1.77x": Field(H200_27 + "call1/decoders.log", "target Mask-Predict batch 1", after="(at least):"),
        "2.37x": Field(H200_26L + "call1/decoders.log", "target Mask-Predict batch 1", after="(at least):"),
        "2.02x": Field(H200_26L + "call3/decoders.log", "target Mask-Predict batch 1", after="(at least):"),
        "32": Field("bench/bench_early_exit.py", '"--dec-len"'),
        "80": Field("bench/bench_early_exit.py", '"--src"'),
        # the batch-1 pass of the third lease (call 1) and of the second (call 4, a cast per replay)
        "0.12": Field(H200_27 + "call1/exit.log", "| layer 2 |"),
        "0.17": Field(H200_26L + "call4/exit.log", "| layer 2 |"),
        "0.26 @ are 0.26 ms": lambda: sum(value(f) for f in FIRST_FINISH_READ),
        "0.26 @ already 0.26 of": lambda: (
            sum(value(f) for f in FIRST_FINISH_READ)
            / value(Field(H200_27 + "call1/exit.json", "rows/batch=1&what=masked, exit disabled, graphs/ms"))
        ),
        "64 @ batch 64 and": Field("bench/bench_early_exit.py", '"--big-batches"'),
        "256": Field("bench/bench_early_exit.py", '"--big-batches"'),
        "0.32": Field(H200_27 + "call1/exit.json", f"rows/batch=64&what={ALL_AT_1}/ratio"),
        "0.27": Field(H200_27 + "call1/exit.json", f"rows/batch=256&what={ALL_AT_1}/ratio"),
        "0.9": Field(H200_27 + "call1/ckpt.json", "ckpt_rows/1/threshold"),
        "0.79": Field(H200_27 + "call1/ckpt.json", "ckpt_rows/1/flops"),
        "0.7": Field(H200_27 + "call1/ckpt.json", "ckpt_targets/0/wanted"),
        "0.6": Field(H200_27 + "call1/ckpt.json", "ckpt_rows/0/threshold"),
        "0.69": Field(H200_27 + "call1/ckpt.json", "ckpt_rows/0/time"),
        "768": Field("bench/bench_offramp.py", '"--width"'),
        "768 @ 16k x 768": Field("bench/bench_gather.py", '"--width"'),
        "2,048": Field(H200_27 + "call3/offprof.log", "profile, V 8000 N 4096, chunk"),
        "2,048 @ stays 2,048": lambda: offramp_chunk(50000),
        "8,000": Field(H200_27 + "call3/offprof.log", "V = "),
        "50,000": Field(H200_27 + "call3/offprof.log", "V = #2"),
        "0.62x": lambda: (
            value(Field(H200_27 + "call3/offprof.log", OURS_8000, after="its kernels"))
            / value(Field(H200_27 + "call3/offprof.log", CHAIN_8000, after="its kernels"))
        ),
        "4,096": lambda: offramp_chunk(8000),
        "4,096 @ N 4,096": Field(H200_27 + "call3/offramp4096.log", "| 4096 |"),
        "64": Field(H200_27 + "call4/attention.json", "records/0/D"),
        "64 @ default at D 64": Field("kernels/attention_plan.py", "FUSED_DQ_MAX_D = "),
        "2.5": Field("bench/bench_attention.py", '("bwd", 2.5 * fwd_flops)'),
        "2.5x": Field("bench/bench_attention.py", '("bwd", 2.5 * fwd_flops)'),
        # SASS of the FULL loop (loops/1) as kernels/aot.py recorded it with the fused backward
        "1,043": Field(AOT_39, "16/loops/1", at="a62f5a0"),
        "949": Field(AOT_39, "9/loops/1", at="a62f5a0"),
        "428": Field(AOT_39, "10/loops/1", at="a62f5a0"),
        "3.9": Field(BUDGET, "environment"),
        "3.5": Field(H200_27 + "call4/attention.json", "records/layout=pmlm/bwd_over_fwd_alt"),
        "3.8": Field(H200_27 + "call4/attention.json", "records/layout=s2s-2k/bwd_over_fwd_alt"),
        "4": Field(H200_26L + "RUN.md", "4+4 layers of width"),
        "16 @ 16 test": Field(H200_26L + "call4/ckpt.json", "n"),
        "0.1%": Field(H200_26 + "results-call2.md", "| pmlm |"),
        "5%": Field(H200_26 + "attention.json", "targets/target^=pmlm D64: map /wanted"),
        "200": Field(H200_26 + "attention.json", f"targets/target^={TFLOPS_TARGET}/wanted"),
        "128": Field(H200_26 + "attention.json", "records/layout=s2s-2k&D=128/D"),
        "2048": Field(H200_26 + "attention.json", "records/layout=s2s-2k&D=128/L"),
        "64 @ batch 64 in": Field(H200_26 + "RUN.md", "--forced --model base --batch"),
        "1.15x": Field("bench/bench_early_exit.py", "wanted=1.15", after="wanted="),
        "1.2x": Field(H200_26 + "decode.log", "target V 8000 N 16384", after=">="),
        "8000": Field(H200_26 + "decode.log", "V = 8000"),
        "50000": Field(H200_26 + "decode.log", "V = 50000"),
        "16k": Field("bench/bench_gather.py", '"--tokens"'),
        "25%": Field("bench/bench_gather.py", "for frac in"),
        "50%": Field("bench/bench_gather.py", "for frac in"),
        "90%": Field("bench/bench_gather.py", "for frac in"),
        "6": Field("bench/gpu_profile.py", "mfu = 6 * step.n_params"),
    },
    "docs/design.md": {
        "1%": Field("tests/test_dtype.py", "assert worst <"),
        "80%": UNILM41,
        "10%": UNILM41,
        "4.6": Paper("UniLMv2 4.6: the variants use the same masking"),
        "0.1 @ default 0.1": Field("core/unilm/pmlm.py", "KEEP = "),
        "0.1 @ Dropout 0.1": Paper("UniLMv2 Table 10: dropout 0.1"),
        "90%": Field("core/unilm/pmlm.py", "p_mask = 0.9 - keep"),
        "90": Field("core/unilm/pmlm.py", "p_mask = 0.9 - keep", div=0.01),
        "80": Field("core/positions.py", "DEFAULT_MAX_SRC = "),
        "7e-5 @ UniLMv2 7e-5": Paper("UniLMv2 appendix D: 7e-5 after 6e-4"),
        "6e-4": Paper("UniLMv2 appendix D: 7e-5 after 6e-4"),
        "7e-5 @ MLAE 7e-5": Paper("MLAE Tables 8 and 11: 7e-5 or 1e-4 after 5e-4"),
        "1e-4": Paper("MLAE Tables 8 and 11: 7e-5 or 1e-4 after 5e-4"),
        "5e-4": Paper("MLAE Tables 8 and 11: 7e-5 or 1e-4 after 5e-4"),
        "1.5e-4": Field("results/cpu-finetune-lr/lr1.5e-4/config.json", "args/lr"),
        "1e-3": default("train.py --lr"),
        "1e-3 @ weights to 1e-3": Field("tests/test_train.py", "RESUME_TOLERANCE = "),
        "2e-3 @ to 2e-3 and": Field("tests/test_train.py", "RESUME_TOLERANCE = "),
        "0": Word("a zero: the masking's end, a mean, the bias slope's end, no dropout"),
        "1": ONE,
        "5 @ beam 5": default("eval.py --beam"),
        "0.6": default("eval.py --length-penalty"),
        "5": Paper("Wu et al. 2016, section 7: lp = ((5 + len) / 6) ^ alpha"),
        "6": Paper("Wu et al. 2016, section 7: lp = ((5 + len) / 6) ^ alpha"),
        "62,588": corpus_size,
        "6.6": summary_words,
        "55": lambda: mean_words("document"),
        "58": lambda: len({r["section"] for r in corpus()}),
        "56,803": lambda: len(split("train")),
        "2,876": lambda: len(split("valid")),
        "2,909": lambda: len(split("test")),
        "130": Field("core/errors.py", "sys.exit(130)"),
        "143": Field("tests/test_reproduce.py", "returncode == 143"),
        "2 @ status 2": Field("core/errors.py", "sys.exit(2)"),
        "2 @ 1 or 2": Field("core/flags.py", "DEC_LEN = Rule(lambda v: v >= 2"),
        "2 @ from 2 to": Field("core/model.py", "slopes = torch.linspace("),
        "0.02": Field("core/model.py", "BERT's N(0, 0.02) everywhere"),
        "768": Field("core/model.py", "BERT's N(0, 0.02) everywhere"),
        "16": Field("core/model.py", "REL_SCALE = "),
        # early runs kept in no result file: the README that first recorded them, at its commit
        "400 @ 400 × 4,096": Field("train.py", '"--steps"', at="4d0732f"),
        "4,096": Field("train.py", '"--batch-tokens"', at="4d0732f"),
        "800": Field("README.md", "800 steps of 2048 tokens", at="ee0d8c8"),
        "2048": Field("README.md", "800 steps of 2048 tokens", at="ee0d8c8"),
        "2e-3": Field("README.md", "800 steps of 2048 tokens", at="ee0d8c8"),
        "400 @ 400 steps of 4096": Field("README.md", "left it only near step", at="ee0d8c8"),
        "4096": Field("README.md", "left it only near step", at="ee0d8c8"),
        "275": Field("README.md", "left it only near step", at="ee0d8c8"),
        "300": Field("README.md", "at step 300 of 400", at="ee0d8c8"),
        "400 @ 300 of 400": Field("README.md", "at step 300 of 400", at="ee0d8c8"),
        "400": default("train.py --steps"),
        "8192": default("train.py --batch-tokens"),
        "100": Field("README.md", "6.917 at step", at="ee0d8c8"),
        "12": Field("README.md", "12 steps of the", at="fa80356"),
        "75": Field("README.md", "12 steps of the", at="fa80356"),
        "406": Field("README.md", "12 steps of the", at="fa80356"),
        "331": lambda: compiled_more(),
        "200": Field("train.py", '"--steps"', at="fa80356"),
        "0.8": lambda: compiled_more() / value(default("train.py --steps")),
        "13%": lambda: compiled_more() / value(default("train.py --steps")) / eager_step(),
    },
    "docs/elmer.md": {
        "32": default("train.py --dec-len"),
        "32 @ 32 sequences": Field("core/elmer/model.py", "at B 32, T 128"),
        "128 @ of 128,": Field("core/elmer/model.py", "at B 32, T 128"),
        "128": default("train.py --seq-len"),
        "1": ONE,
        "0": Word("no label smoothing"),
        "1.22": lambda: entropy_floor(0.1, 8000),
        "0.77": lambda: entropy_floor(0.1, 97),
        "0.1": Field("core/architectures.py", "label_smoothing: float = "),
        "8000": default("train.py --vocab-size"),
        "97": Field("tests/test_elmer.py", "V = "),
        "0.5": Paper("ELMER Figure 2: delta 0.5"),
        "2022": Paper("CALM: Schuster et al., NeurIPS 2022"),
        "2M": lambda: value(SMALL_WIDTH) * value(default("train.py --vocab-size")),
        "256": SMALL_WIDTH,
        "1.94x": lambda: entropy_exit_cost(6),
        "1.77x": lambda: entropy_exit_cost(4),
        # a copy-task comparison first recorded in the README of 1310474
        "3": Field("README.md", COPY_RUNS, at="1310474"),
        "30": Field("README.md", COPY_RUNS, at="1310474"),
        "60": Field("README.md", COPY_RUNS, at="1310474"),
        "2 @ 2 seeds": Field("README.md", COPY_RUNS, at="1310474"),
        "2 @ 2 epochs": Field("results/cpu-decoders/RUN.md", "2 epochs ="),
        "1,000": Field("results/cpu-decoders/RUN.md", "--limit 1000 --no-lead --exit-measure entropy"),
        "5": Field("results/cpu-decoders/RUN.md", "for b in"),
        "2": Field("results/cpu-decoders/RUN.md", "for it in"),
        "4": Field("results/cpu-decoders/RUN.md", "for it in"),
        "10": Field("results/cpu-decoders/RUN.md", "for it in"),
        "800": SMALL_STEPS_WAS,
    },
    "docs/kernels.md": {
        "2": Field("kernels/tilemap.py", "BIG = 2 **", after="="),
        "30": Field("kernels/tilemap.py", "BIG = 2 **", after="**"),
        "1": ONE,
        "64": Field("kernels/attention_plan.py", "64: Config("),
        "5": Field("kernels/pseudo_attention.py", "launches 5 + 7 n"),
        "16": Field("kernels/attention_plan.py", "16 bytes at a time in float32"),
        "64 @ up to 64": Field("kernels/attention_plan.py", "FUSED_DQ_MAX_D = "),
        "128": Field("kernels/attention_plan.py", "128: Config("),
        "1.15x": LOOP_BOUNDS,
        "1.35x": LOOP_BOUNDS,
        "1.4x": LOOP_BOUNDS,
        "2.0x": LOOP_BOUNDS,
        "2.2x": LOOP_BOUNDS,
        "2 @ keeps 2 stages": Field("kernels/attention_plan.py", "128: Config("),
        "3 @ tries 3": Field("bench/attention_cases.py", "base._replace(fwd_stages=3)"),
        "3.9": Field(BUDGET, "environment"),
        "3.6": Field(H200_28 + "call1/step.json", "triton"),
        "4": lambda: np.dtype("float32").itemsize,
        "2 @ a 2-byte": lambda: np.dtype("float16").itemsize,
        "16 @ tables, 16": Field("kernels/attention_plan.py", "16 bytes at a time in float32"),
        "64k": Field("bench/bench_step.py", '"--tokens"'),
        "8 @ the 8-warp": Field(
            "bench/attention_cases.py", "base._replace(BMK=64, BNK=64, kv_warps=8)", after="kv_warps="
        ),
        "8 @ the 8-element": Field("kernels/baselines.py", "MASK_ALIGN = "),
        "32": Field("kernels/attention_plan.py", "64: Config("),
        "3 @ at 3 stages": Field("bench/attention_cases.py", "base._replace(kv_stages=3)", after="kv_stages="),
        "16 @ 16-byte": Field("kernels/early_exit.py", "(16-byte accesses when"),
        "2,048": lambda: offramp_chunk(50000),
        "4,096": lambda: offramp_chunk(8000),
        "2,048 @ (2,048-row": Field(H200_27 + "call3/offprof.log", "profile, V 8000 N 4096, chunk"),
        "8,000": Field(H200_27 + "call3/offprof.log", "V = "),
    },
    "docs/mlae.md": {
        "15%": Paper("MLAE 3.1: 15% of the tokens masked"),
        "3": Paper("MLAE 3.1: spans of mean length 3"),
        "300": Field("results/studies/mlae-decoders.json", "note"),
        "0.6": default("finetune.py --mask-init"),
        "1": ONE,
        "0": Word("a ratio of none"),
        "0.1": Field("core/mlae/nar.py", "LENGTH_LOSS = "),
        "64": Field("results/studies/mlae-encoder.json", "note"),
        "128": Field("results/studies/mlae-encoder.json", "note"),
        "2": Field("core/config.py", "DEPTHS = "),
        "4": Field("core/config.py", "DEPTHS = "),
        "45%": Paper("MLAE Figure 3: approximately 45% to 75%"),
        "75%": Paper("MLAE Figure 3: approximately 45% to 75%"),
        "0.15": Paper("MLAE Figure 3: 15% over none, 0.6 over 0.15"),
        "0.6 @ 0.6 over": Paper("MLAE Figure 3: 15% over none, 0.6 over 0.15"),
    },
    "docs/reproducing.md": {
        "0": Word("a ratio of none"),
        "0.9": Field("reproduce/plan.py", "for m in (0.75, 0.9)", after="0.75,"),
        "8,192": default("train.py --batch-tokens"),
        "0.5": Field("reproduce/report.py", "PLATEAU = "),
        "1e-3": default("finetune.py --lr"),
        "95%": Field("reproduce/significance.py", "would find at 95% confidence and 80% power"),
        "80%": Field("reproduce/significance.py", "would find at 95% confidence and 80% power"),
        "1,500": Field("reproduce/execute.py", 'embedded_records("train")[:'),
        "96": Field("reproduce/execute.py", '(("train", 96)'),
        "8": Field("reproduce/execute.py", '(("train", 96)'),
        "4": Field("reproduce/plan.py", 'model="tiny", steps=', after="steps="),
        "384": Field("reproduce/plan.py", "--batch-tokens 384"),
        "1": ONE,
        "3 @ (3 steps)": lambda: math.ceil(value(TINY_TRAIN) / value(TINY_BATCH)),
        "2 @ on 2 cores": Field(CPU_DEFAULT + "RUN.md", "2-core CI-like machine"),
        "2": Field("reproduce/plan.py", "SEEDS = "),
        "3": Field("reproduce/plan.py", "SEEDS = "),
        "0.1": Field("reproduce/plan.py", '"--epochs {epochs} --dropout '),
        "100": Field("reproduce/plan.py", "--warmup 60 --eval-every"),
        "1.96": Field("reproduce/significance.py", "Z = "),
        "2.8": lambda: (lambda z: z.Z + z.Z_POWER)(__import__("reproduce.significance").significance),
        "22": lambda: len(__import__("reproduce.orderings").orderings.ORDERINGS),
    },
    "docs/unilmv2.md": {
        "15%": Paper("UniLMv2 Algorithm 1: 15% masked"),
        "2": UNILM_ALG1,
        "6": UNILM_ALG1,
        "0.4": UNILM_ALG1,
        "80%": UNILM41,
        "10%": UNILM41,
        "0.1": Paper("UniLMv2 Table 10: label smoothing 0.1"),
        "5": default("eval.py --beam"),
        "0.6": default("eval.py --length-penalty"),
        "16x": Field("core/model.py", "REL_SCALE = "),
        "7e-5": UNILM_XSUM,
        "6e-4": UNILM_XSUM,
        "14": UNILM_XSUM,
        "160": Paper("UniLMv2 4.1: 160GB of text"),
        "800": SMALL_STEPS_WAS,
    },
    # a dated record: each entry's numbers are its commit's, a "was N" the commit's before
    "releases/README.md": {
        "8": Field("core/evaluation.py", '(("LEAD-8", 8)'),
    },
    "CHANGELOG.md": {
        "1.0": default("finetune.py --train-share"),
        "128": Field("bench/bench_step.py", "args.micro_batch = 16 if"),
        "16": Field("bench/bench_step.py", '"--micro-batch", type=int, default=', at="7f6c657"),  # before 73aa205
        "0": Word("the masking ratio's end, none; a lag of none"),
        "6": Field("reproduce/plan.py", 'model="small", steps=1600', after="epochs="),
        # before 80b7c4d
        "3 @ (was 3)": Field("reproduce/plan.py", 'model="small", steps=1600', at="1b035c2", after="epochs="),
        "3": default("finetune.py --epochs"),
        "1.5e-4": Field("results/cpu-finetune-lr/lr1.5e-4/config.json", "args/lr"),
        "5e-4": Field("results/cpu-finetune-lr/lr5e-4/config.json", "args/lr"),
        "1e-3": Field("results/cpu-finetune-lr/lr1e-3/config.json", "args/lr"),
        "0.05": Field("finetune.py", '"--warmup-frac"', at="6c30421"),
        "0.1": Field("finetune.py", '"--warmup-frac"', at="c134796"),  # before 6c30421
        "1 @ as a maximum (was 1)": Field("finetune.py", '"--epochs"', at="c134796"),
        "0.5": default("finetune.py --valid-every"),
        "2": default("finetune.py --patience"),
        "2000": default("finetune.py --valid-examples"),
        "512": Field("finetune.py", '"--valid-examples"', at="c134796"),
        "1,600": Field("reproduce/plan.py", 'model="small", steps=', after="steps="),
        "800 @ (was 800)": SMALL_STEPS_WAS,
        "800 @ LPLM 800": lplm_steps,
        # before 7a763df
        "1,000": Field("reproduce/plan.py", 'model="small", steps=1600', at="b6bbadd", after="limit="),
        "64 @ head dims up to 64": Field("kernels/attention_plan.py", "FUSED_DQ_MAX_D = "),
        "2 @ 2^25": Field("kernels/offramp_loss.py", "CHUNK_ELEMENTS = "),
        "25": Field("kernels/offramp_loss.py", "CHUNK_ELEMENTS = "),
        "4,096": lambda: offramp_chunk(8000),
        "8,000": default("train.py --vocab-size"),
        "1": ONE,
        "64": Field("kernels/attention_plan.py", "64: Config("),
        "4": Field("kernels/attention_plan.py", "64: Config("),
        "8": Field("kernels/attention_plan.py", "64: Config(", at="dba9304"),
        "32": Field("kernels/attention_plan.py", "128: Config("),
        "128 @ (D 128)": Field("kernels/attention_plan.py", "128: Config("),
        "128 @ Before: 128": Field("kernels/attention_plan.py", "64: Config(", at="0df7087"),  # before 0756aaf
        "64 @ 128 x 64 forward": Field("kernels/attention_plan.py", "64: Config(", at="0df7087"),
        # lag 0, batch 1 (results/h200-2026-11-26/exit.json): the exit path's wait, the extra layer of lag 1
        "3%": lambda: value(Field(EXIT_26, f"rows/what={LAG0_NOBODY}/ratio")) - 1,
        "18": lambda: (
            100
            * (
                value(Field(EXIT_26, f"rows/what={ALL_AT_1}/ratio"))
                - value(Field(EXIT_26, f"rows/what={ALL_AT_1}, lag 0/ratio"))
            )
        ),
        "3.6": Field("results/h200-2026-11-26/RUN.md", "triton"),
        "80%": UNILM41,
        "10%": UNILM41,
        "4.1": UNILM41,
        "90%": Field("core/unilm/pmlm.py", "p_mask = 0.9 - keep"),  # at --keep 0
        "2.03x": Field("results/studies/dtype.json", "rows/dtype=bfloat16/ratio"),
    },
}
