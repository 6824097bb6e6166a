"""The runs behind the three papers' comparisons, and the budgets they run at (reproduce/runner.py).

Every pretraining reads the same tokens (the budget's --steps x --batch-tokens of --seq-len
windows); every fine-tuning of one task the same epochs of the same pairs; every evaluation the
same test sample. One run per line: name, script, flags, what the row is. Flags may hold
{placeholders}: {pre-X} is run pre-X's last.pt, {ft-X} is run X's best.pt (these make the
dependencies), and the budget's fields ({scratch}, {elmer}, {sym}, ...).

A run whose flags this checkout's scripts reject (a flag or a choice not there yet) is listed as
"not on this branch" and skipped with everything that depends on it; a run with a TODO note is
skipped the same way until the note goes.

Fine-tuning follows finetune.py's defaults (the peak learning rate a grid chose on validation,
MLAE's inverse square root decay, early stopping on the validation loss: docs/design.md,
"Fine-tuning recipe"), the same for both sides of every pair; the cpu budget fine-tunes
summarization on a fixed half of the training pairs. Every compared fine-tuning runs under one
seed first; its further seeds (SEEDS: NAME-s2, NAME-s3 with --seed 2, 3) wait for the last stage
and run only where a pair needs one (reproduce/further_seeds.py). The report reads a pair over its
test examples and the seed's variance (reproduce/significance.py).
"""

import re
from typing import NamedTuple

from reproduce.orderings import ORDERINGS, parse_chain


class Run(NamedTuple):
    name: str  # the output directory under --out, and what --only matches
    script: str  # train | finetune | eval
    flags: str  # with {placeholders}
    label: str  # the row's name in RESULTS.md
    todo: str = ""  # why the run cannot work on this branch yet (the runner skips it)
    steps_x: float = 1  # a pretraining's steps in budget --steps (the same for a pair it is compared in)
    epochs_x: float = 1  # a fine-tuning's most epochs in budget --epochs (NAR: more, as the papers give it)


def pretrain(name, flags, label, todo="", steps_x=1):
    return Run("pre-" + name, "train", flags, label, todo, steps_x)


def steps_of(run, fields):
    """The steps a pretraining runs: the budget's --steps times the run's multiple."""
    return max(1, round(fields["steps"] * run.steps_x))


def epochs_of(run, fields):
    """The most epochs a fine-tuning runs: the budget's --epochs times the run's multiple (a NAR
    run's: the budget's nar_epochs_x where it sets one)."""
    nar = " --nar" in f" {run.flags}"
    return fields["epochs"] * (fields.get("nar_epochs_x", run.epochs_x) if nar else run.epochs_x)


def finetune(name, init, flags, label, todo="", epochs_x=1):
    init = "--init none " if init is None else f"--init {{pre-{init}}} "
    return Run(name, "finetune", init + flags, label, todo, epochs_x=epochs_x)


# MLAE gives NAR fine-tuning 10x the AR updates (its Table 11: 300K against 30K); here twice the
# most epochs, each run stopping on its validation loss
NAR_EPOCHS = 2


def seed_runs(run, n):
    """RUN and its copies under seeds 2..n (NAME-s2 ...): the same flags and --seed K."""
    return [run] + [run._replace(name=f"{run.name}-s{k}", flags=f"{run.flags} --seed {k}") for k in range(2, n + 1)]


def seeds_of(name, names):
    """The runs among NAMES that are NAME under another seed (NAME itself first)."""
    return [name] + sorted(
        (n for n in names if re.fullmatch(re.escape(name) + r"-s\d+", n)), key=lambda n: int(n.rsplit("-s", 1)[1])
    )


# MLAE Figure 3's sweep of the initial mask ratio m0 under the linear schedule: run -> m0. m0 = 0 is
# schedule none; sum-mlae runs at finetune.py's default --mask-init (tests/test_reproduce.py checks it)
DEFAULT_M0 = 0.6
MASK_SWEEP = {
    "sum-mlae-none": 0.0,
    **{f"sum-mlae-m{round(100 * m)}": m for m in (0.15, 0.3, 0.45)},
    "sum-mlae": DEFAULT_M0,
    **{f"sum-mlae-m{round(100 * m)}": m for m in (0.75, 0.9)},
}

# -----------------------------------------------------------------------------
# pretraining: one objective per run, all from the same tokens

PRETRAIN = [
    pretrain("pmlm", "--objective pmlm", "PMLM, AE+PAR (UniLMv2)"),
    # train.py's mlm is pmlm --losses ae, both masking 80/10/10 (UniLMv2 4.1): RoBERTa's MLM of the
    # papers' main tables and section 4.6's AE-only variant ("the same masking strategy") are one run
    pretrain("mlm", "--objective mlm", "MLM = AE only, 80/10/10 (RoBERTa; UniLMv2 4.6)"),
    pretrain("pmlm-par", "--objective pmlm --losses par", "PMLM, PAR only (UniLMv2 4.6)"),
    pretrain("pmlm-norel", "--objective pmlm --no-rel-pos", "PMLM without relative position bias (UniLMv2 4.6)"),
    pretrain("mlae-a", "--objective mlae --decoder a", "MLAE, decoder (a) (MLAE Figure 2)"),
    pretrain("mlae-b", "--objective mlae --decoder b", "MLAE, decoder (b): cross-attention (MLAE Table 6)"),
    pretrain(
        "mlae-sym",
        "--objective mlae --decoder a --enc-layers {sym} --dec-layers {sym}",
        "MLAE, symmetric depths (MLAE Table 6)",
    ),
    pretrain("t5", "--objective t5", "T5, span corruption, AR decoder"),
    pretrain("t5-nar", "--objective t5-nar", "T5 pretrained with a NAR decoder (MLAE's T5-NAR)"),
    # an LPLM step costs about 4 pretraining steps of the others at k = 2; ELMER's claims compare it
    # with no pretraining only, so it runs half the budget's steps
    pretrain("elmer", "--objective elmer {elmer}", "ELMER's LPLM", steps_x=0.5),
]

# the pretrainings whose weights the repository keeps (reproduce/weights.py): each feeds more runs
# than fit the sitting that made it, so a later machine starts them from its packed copy; the rest
# are short enough to run again with their fine-tunings in one sitting. A pretraining leaves the
# list once every run that needs it has finished and no further seed of them is asked for
# (pre-t5-nar: nar-t5 evaluated, its second seed not needed, RESULTS.md's further seeds)
KEEP_WEIGHTS = ("pre-mlae-a", "pre-elmer", "pre-mlae-b", "pre-t5", "pre-pmlm")

# -----------------------------------------------------------------------------
# fine-tuning: summarization (document -> one-line summary) and classification (-> section)

FINETUNE = [
    # UniLMv2: PMLM vs MLM vs none, and the section 4.6 ablations
    finetune("sum-pmlm", "pmlm", "", "PMLM (UniLMv2)"),
    finetune("sum-mlm", "mlm", "", "MLM (AE only)"),
    finetune("sum-unilm-scratch", None, "--arch unilm {scratch}", "no pretraining (one stack)"),
    # the control of T5: the same encoder-decoder with no pretraining
    finetune("sum-t5-scratch", None, "--arch t5 {scratch}", "T5 shape, no pretraining"),
    finetune("sum-pmlm-par", "pmlm-par", "", "PMLM, PAR only"),
    finetune("sum-pmlm-norel", "pmlm-norel", "", "PMLM without rel. pos."),
    # MLAE Table 2: AR generation
    finetune("sum-mlae", "mlae-a", "", "MLAE AR, seq2seq style (linear schedule, cross-attn from self)"),
    # MLAE Table 5 (below) compares styles and decoders without the masking scheduler (section 5.1:
    # "for a fair comparison"), as Table 6 does (5.2.2); its seq2seq "pre-trained" row is sum-mlae-none
    finetune("sum-mlae-unilm", "mlae-a", "--style unilm --mask-schedule none", "MLAE AR, UniLM style (no schedule)"),
    finetune("sum-t5", "t5", "", "T5 AR"),
    finetune("sum-roberta", "mlm", "--style seq2seq", "RoBERTa encoder + random decoder"),
    # MLAE Table 3: NAR generation (Mask-Predict); the paper's MLAE NAR is decoder (b), Table 6
    finetune("nar-mlae-a", "mlae-a", "--nar", "MLAE NAR, decoder (a)", epochs_x=NAR_EPOCHS),
    finetune("nar-mlae-b", "mlae-b", "--nar", "MLAE NAR, decoder (b)", epochs_x=NAR_EPOCHS),
    # not a row of the papers: decoder (b)'s pretrained cross-attention table kept through fine-tuning
    # (finetune.py --cross-anchor); against nar-mlae-b it says whether dropping it, as CMLM does, costs
    # the NAR claims their decoder's position sense (core/mlae/model.py: without it (b) barely learns)
    finetune(
        "nar-mlae-b-anchored",
        "mlae-b",
        "--nar --cross-anchor proportional",
        "MLAE NAR, decoder (b), its cross-attention table kept",
        epochs_x=NAR_EPOCHS,
    ),
    finetune("nar-t5", "t5-nar", "--nar", "T5-NAR (pretrained NAR decoder)", epochs_x=NAR_EPOCHS),
    finetune("nar-cmlm", None, "--arch t5 --nar {scratch}", "CMLM from scratch", epochs_x=NAR_EPOCHS),
    # the fine-tuning rate's check: MLAE and T5 at 0.15x pretraining's rate (the papers fine-tune at
    # 0.14-0.2x theirs: MLAE Table 11, UniLMv2's 7e-5 after 6e-4), with twice the epochs to stop on
    # validation, beside the same pair at the rate the grid chose (finetune.py's default)
    finetune("sum-mlae-lr", "mlae-a", "--lr 1.5e-4", "MLAE AR at 0.15x pretraining's rate", epochs_x=2),
    finetune("sum-t5-lr", "t5", "--lr 1.5e-4", "T5 AR at 0.15x pretraining's rate", epochs_x=2),
    # MLAE Table 5: style and the decoder's initialisation
    finetune(
        "sum-mlae-cross-partial",
        "mlae-a",
        "--cross-init partial --mask-schedule none",
        "MLAE AR, cross-attention random (no schedule)",
    ),
    finetune(
        "sum-mlae-cross-random",
        "mlae-a",
        "--cross-init random --mask-schedule none",
        "MLAE AR, whole decoder random (no schedule)",
    ),
    # not a row of the papers: T5's encoder under a random decoder. With sum-mlae-cross-random it
    # splits MLAE's AR gap to T5 into the encoders (both decoders random) and the decoders' pretraining
    finetune("sum-t5-cross-random", "t5", "--cross-init random", "T5 encoder, whole decoder random"),
    # MLAE Table 6: decoder (b) and symmetric depths, AR (the NAR (b) row is nar-mlae-b)
    finetune("sum-mlae-b", "mlae-b", "--mask-schedule none", "MLAE AR, decoder (b) (no schedule)"),
    finetune("sum-mlae-sym", "mlae-sym", "--mask-schedule none", "MLAE AR, symmetric depths (no schedule)"),
    # MLAE Algorithm 1 and Figure 3: the masking schedule and its initial ratio m0 (0.6 is sum-mlae,
    # m0 = 0 is schedule none)
    finetune("sum-mlae-constant", "mlae-a", "--mask-schedule constant", "MLAE AR, constant schedule"),
    finetune("sum-mlae-none", "mlae-a", "--mask-schedule none", "MLAE AR, no schedule (m0 0)"),
    *[
        finetune(name, "mlae-a", f"--mask-init {m}", f"MLAE AR, linear from m0 {m}")
        for name, m in MASK_SWEEP.items()
        if name.startswith("sum-mlae-m")
    ],
    # ELMER: hard and soft exit, with and without LPLM pretraining
    finetune("elmer-hard", "elmer", "--exit hard", "ELMER-hard"),
    finetune("elmer-soft", "elmer", "--exit soft", "ELMER-soft"),
    finetune("elmer-hard-scratch", None, "--arch elmer --exit hard {scratch} {elmer_ft}", "ELMER-hard, no pretraining"),
    finetune("elmer-soft-scratch", None, "--arch elmer --exit soft {scratch} {elmer_ft}", "ELMER-soft, no pretraining"),
    # classification: UniLMv2 4.6 (its ablations are NLU results) and MLAE Table 1 (the encoders)
    finetune("cls-pmlm", "pmlm", "--task classify", "PMLM ([SOS])"),
    finetune("cls-mlm", "mlm", "--task classify", "MLM ([SOS])"),
    finetune("cls-pmlm-par", "pmlm-par", "--task classify", "PMLM, PAR only"),
    finetune("cls-pmlm-norel", "pmlm-norel", "--task classify", "PMLM without rel. pos."),
    finetune("cls-mlae", "mlae-a", "--task classify", "MLAE encoder ([EOS])"),
    finetune("cls-t5", "t5", "--task classify", "T5 encoder ([EOS])"),
    # the control of every classifier: the unified stack with no pretraining
    finetune("cls-scratch", None, "--arch unilm --task classify {scratch}", "no pretraining ([SOS])"),
]

# the runs of each paper's central claim get three seeds, the other compared runs two; the points
# of MLAE Figure 3 that no claim reads, one
CENTRAL = {
    "sum-pmlm",
    "sum-mlm",
    "sum-unilm-scratch",
    "sum-mlae",
    "sum-t5",
    "sum-t5-scratch",
    "nar-mlae-b",
    "nar-t5",
    "nar-cmlm",
    "cls-mlae",
    "cls-mlm",
    "cls-t5",
    "elmer-hard",
    "elmer-hard-scratch",
}
FIGURE_ONLY = {"sum-mlae-m30", "sum-mlae-m45", "sum-mlae-m75", "sum-mlae-m90"}
# the runs of the project's checks (reproduce/orderings.py CHECKS) and the rows no claim reads: one seed each
CHECK_RUNS = {"nar-mlae-b-anchored", "sum-mlae-lr", "sum-t5-lr"}
ONE_SEED = FIGURE_ONLY | CHECK_RUNS | {"sum-pmlm-par", "sum-t5-cross-random"}
SEEDS = {r.name: 3 if r.name in CENTRAL else 1 if r.name in ONE_SEED else 2 for r in FINETUNE}
FINETUNE = [s for r in FINETUNE for s in seed_runs(r, SEEDS[r.name])]

# the exit curve (ELMER 5.4, its Figure 2): one checkpoint decoded at each threshold of each exit
# measure (entropy is the paper's; state and the learnt classifier cost O(C) per token)
EXIT_SWEEPS = {"entropy": "0,0.25,0.5,1,2,inf", "state": "0.999,0.995,0.99,0.98", "classifier": "0.95,0.9,0.8,0.6"}


def evaluations():
    """One evaluation of every fine-tuned run, and the hard-exit threshold sweeps."""
    runs = [Run("eval-" + f.name, "eval", f"{{ft-{f.name}}}", f.label) for f in FINETUNE]
    runs += [
        Run(
            f"eval-sweep-elmer-hard-{m}",
            "eval",
            f"{{ft-elmer-hard}} --exit-measure {m} --exit-threshold {t}",
            f"ELMER-hard, {m} exit threshold sweep",
        )
        for m, t in EXIT_SWEEPS.items()
    ]
    return runs


PLAN = PRETRAIN + FINETUNE + evaluations()
BY_NAME = {r.name: r for r in PLAN}


def seed_number(name):
    """1 for a run, K for its copy NAME-sK under seed K."""
    m = re.search(r"-s(\d+)$", name)
    return int(m.group(1)) if m else 1


def seed_one(name):
    """The run NAME is a copy of under another seed (NAME itself if it is the seed-1 run)."""
    return re.sub(r"-s\d+$", "", name)


def plan_for(fields):
    """The plan at a budget: its runs under at most the budget's `seeds` seeds."""
    return [r for r in PLAN if seed_number(r.name) <= fields.get("seeds", 3)]


# -----------------------------------------------------------------------------
# budgets: the flags every run of a script gets, and the fields of the placeholders.
# {steps} {epochs} {limit} {permutations} are overridable on the command line.

BUDGETS = {
    # CI: the tiny preset on a few hundred examples cut from the embedded corpus (written under
    # OUT/data), a handful of steps: the whole pipeline in minutes on 2 cores, no learning
    "tiny": dict(
        model="tiny",
        steps=4,
        epochs=1,
        limit=None,
        permutations=2,
        data="subset",
        seeds=1,
        train="--model tiny --vocab-size 600 --seq-len 48 --batch-tokens 384 --micro-batch 4 --warmup 2 "
        "--steps {steps} --eval-every {steps} --eval-examples 8 --log-every 2 --data {data}/pretrain.txt",
        finetune="--train-data {data}/train.jsonl --valid-data {data}/valid.jsonl --epochs {epochs} --batch 32 "
        "--micro-batch 16 --max-src 32 --max-tgt 12 --rouge-examples 4 --valid-examples 8 --log-every 2",
        eval="--data {data}/test.jsonl --beam 2 --batch-size 4 --latency-samples 1",
        scratch="--model tiny --vocab-size 600",
        elmer="--permutations {permutations} --dec-len 12",
        elmer_ft="--dec-len 12",
        sym="2",
        seconds=dict(train=8, finetune=8, eval=5),
        scale=False,
    ),
    # the CPU table: the small preset (5.4M parameters as a PMLM) on the whole embedded corpus;
    # 1,600 steps: at 800 the PMLM without its relative bias had barely left the unigram plateau
    # (docs/LOG.md), and every curve was still falling. Fine-tuning's most epochs are twice
    # finetune.py's default: at the default every run of the learning-rate grid still had its lowest
    # validation loss at its last (results/cpu-finetune-lr); a run ends on validation before the cap
    "cpu": dict(
        model="small",
        steps=1600,
        epochs=6,
        limit=None,
        permutations=2,
        data=None,
        train="--model small --steps {steps} --warmup 60 --eval-every 100",
        finetune="--epochs {epochs}",
        eval="--limit {limit}",
        summarize="--train-share {share}",
        share=0.5,
        # NAR at AR's cap (not NAR_EPOCHS' twice): a NAR run and its pretraining then fit one sitting
        nar_epochs_x=1,
        scratch="--model small",
        elmer="--permutations {permutations}",
        elmer_ft="",
        sym="3",
        # seconds per pretraining step, per LPLM step at k = 2, per fine-tuning epoch (results/cpu-finetune-lr)
        # and per evaluation of the whole test split, at one thread beside a second runner: the
        # estimates until state.json's measured runs replace them; measured computing in bf16
        seconds=dict(train=4.6, train_elmer=17.0, finetune=1000, eval=250),
        measured_in="bfloat16",
    ),
    # the paper-sized run for us: small preset still (the embedded corpus is a few million tokens:
    # base would only memorise it), 20,000 steps of 8192 tokens, 10 epochs, dropout 0.1 for the
    # many passes, the whole test split, LPLM's k = 10
    "gpu": dict(
        model="small",
        steps=20000,
        epochs=10,
        limit=None,
        permutations=10,
        data=None,
        train="--model small --steps {steps} --warmup 1000 --eval-every 1000 --save-every 1000 --dropout 0.1 "
        "--micro-batch 64",
        finetune="--epochs {epochs} --dropout 0.1",
        eval="",
        scratch="--model small",
        elmer="--permutations {permutations}",
        elmer_ft="",
        sym="3",
        seconds=dict(train=0.06, train_elmer=0.25, finetune=90, eval=120),
    ),
}


def fill(text, fields):
    """Replace {key} by fields[key]; unknown keys stay (the runner resolves run paths)."""
    return re.sub(r"\{([\w-]+)\}", lambda m: str(fields.get(m.group(1), m.group(0))), text)


# -----------------------------------------------------------------------------
# the order the runner takes the runs in, so that a sitting stopped anywhere leaves claims measured:
# the central claims under their first seed, then every other claim under its first seed, then
# the further seeds, each only where a pair needs it (reproduce/further_seeds.py), claim by claim
# in ORDERINGS' order within a stage

# a check's run that goes just before the run it checks: the NAR table is settled before any NAR claim runs
BEFORE = {"nar-mlae-b-anchored": "nar-mlae-b"}

STAGES = ("the central claims, first seed", "the other claims, first seed", "the further seeds, where a pair needs one")


PLACEHOLDER = re.compile(r"\{((?:pre|ft)-[\w-]+)\}")  # {pre-X}: run pre-X's last.pt; {ft-X}: run X's best.pt


def needs_of(run):
    """The runs RUN's flags name ({pre-X}: pre-X; {ft-X}: X)."""
    return [m.group(1) if m.group(1).startswith("pre-") else m.group(1)[3:] for m in PLACEHOLDER.finditer(run.flags)]


def _claim_rank(name):
    """The index of the first claim whose chain names NAME's seed-1 run, a central run's first central
    claim (one whose chain starts with a central run); a run no claim reads comes last."""
    base = seed_one(name)
    chains = [parse_chain(o[3])[0] for o in ORDERINGS]
    reads = [i for i, c in enumerate(chains) if base in c]
    central = [i for i in reads if chains[i][0] in CENTRAL] if base in CENTRAL else []
    return (central or reads or [len(ORDERINGS)])[0]


def _order_keys():
    """{run name: its place}: a fine-tuning's is (stage, claim, seed, 1); its evaluations follow it
    (2); a pretraining goes just before the first run that needs it (0)."""
    keys = {}
    for i, r in enumerate(PLAN):
        if r.script == "finetune":
            stage = 2 if seed_number(r.name) > 1 else 0 if r.name in CENTRAL else 1
            keys[r.name] = (stage, _claim_rank(r.name), seed_number(r.name), 1, i)
    for name, target in BEFORE.items():
        keys[name] = keys[target][:4] + (keys[target][4] - 0.5,)
    for i, r in enumerate(PLAN):
        if r.script == "eval":
            keys[r.name] = keys[needs_of(r)[0]][:3] + (2, i)
    for i, r in enumerate(PLAN):
        if r.script == "train":
            users = [keys[u.name] for u in PLAN if r.name in needs_of(u)]
            keys[r.name] = min(users)[:3] + (0, i) if users else (len(STAGES), 0, 0, 0, i)
    return keys


ORDER = _order_keys()


def stage_of(name):
    """The index in STAGES of the stage run NAME is taken in."""
    return min(ORDER[name][0], len(STAGES) - 1)


def in_order(runs):
    """RUNS in the order the runner takes them (ORDER)."""
    return sorted(runs, key=lambda r: ORDER[r.name])
