"""The soak's fault kinds, its seeded schedule and the documented time each fault may take to resolve.

A fault kind says where it applies (``local``: ``cuetrain local``; ``farm``: the Cuebot double with real RQDs;
``netns``: the 2-host network-namespace bed; ``elastic``: elastic 3-frame jobs on the farm), whether it needs root (a
tmpfs of the soak's own, ``chattr``), how many training attempts it adds to ``run.json`` and how many checkpoint
intervals of steps it may cost.

The schedule (:func:`schedule`) is drawn from one ``random.Random(seed)``: runs of 1 to :data:`MAX_FAULTS_PER_RUN`
faults, each fault a kind drawn from those its path can do here and a step drawn from the run's middle, at least
two checkpoint intervals apart (so every fault hits a gang that trains and has at least two checkpoints behind it:
resuming the second-newest would show as steps lost). An elastic run takes one fault, in the first of those slots
(:func:`_elastic_fault`: the gang must shrink and grow back before the run ends). The same seed gives the same
schedule on every machine that offers the same kinds.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from trainer.core.timeouts import GRACE
from trainer.gang.heartbeat import HEARTBEAT_S

MAX_FAULTS_PER_RUN = 4  # faults drawn per run: 1 .. this [count]

# Elastic runs (the ``elastic`` path): a 3-frame job that may train on with 2 ranks (``--min-world-size``).
ELASTIC_WORLD_SIZE = 3  # frames = ranks of an elastic job
ELASTIC_MIN_WORLD_SIZE = 2  # the gang it shrinks to when one frame is lost [ranks]
ELASTIC_WINDOW_S = 3.0  # ``--elastic-window-s`` [s]: the soak keeps the lost frame's host locked until the gang has
# shrunk, so the window only delays the shrink; a short one keeps the fault short
ELASTIC_CROP = 128  # ``--crop-size`` of elastic runs [px]: ~4x the seconds per step of the 32 px crops (measured
# 0.057 s per 2-rank step, 0.08 s per 3-rank step on the 2-core VM under load), so the shrunk gang's steps outlast
# the grow-back
ELASTIC_MIN_STEPS = 300  # ``--steps`` elastic runs need: >= 225 steps (~13 s) after the fault (at most step 74) for
# the shrunk gang to be asked to regroup (one look of frame 0, 5 s) and reach its next checkpoint
# (docs/failure_handling.md, "Randomized fault soak")
#: The grow-back's own allowance [s]: once the lost frame's host is unlocked, Cuebot's dispatcher books the frame
#: again (the double leaves a host that refused a frame alone for 1 s), RQD starts the frame process, frame 0's
#: node agent sees it at its next look (every 5 s, ``cue_plugin.node.frame.WATCH_S``; the first look can come before
#: the frame is back: two looks), and the shrunk gang trains on to its next checkpoint (one interval) before it
#: regroups. Measured 11.7-13.3 s to the regrouped attempt, its gang's forming included (docs); 30 s leaves room
#: for a loaded machine.
GROW_HOLD_S = 30.0


def stop_hold_s(collective_timeout_s: float) -> float:
    """How long a rank stays SIGSTOPped, or a host cut off, before the soak undoes it [s]: twice the collective
    timeout + 3 s, so the fault outlasts the timeout from every peer's view even when a peer enters its next
    collective late (rank 0 writing a checkpoint on a loaded machine): a gang that then trains on in place, with
    no new attempt, is a bug (the stop vote's group once waited without the timeout), not the fault too short."""
    return 2 * collective_timeout_s + 3


@dataclass(frozen=True)
class Kind:
    """One fault kind.

    Attributes:
        name: the table's name.
        paths: the paths it applies to (``local``, ``farm``, ``netns``, ``elastic``).
        root: needs root (a tmpfs of the soak's own, ``chattr +i``).
        attempts: training attempts it adds to ``run.json`` [count].
        lost_intervals: steps it may cost, in checkpoint intervals (issue 48's bound: 1; 0 where nothing restarts).
        rows_after_undo: the run holds its metrics rows while the fault lasts (a full disk), so "training again" is
            the first row that lands after the soak undid it, not one appended before.
        what: one line for the docs.
    """

    name: str
    paths: tuple[str, ...]
    root: bool = False
    attempts: int = 1
    lost_intervals: int = 1
    rows_after_undo: bool = False
    what: str = ""


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("kill_rank", ("local", "farm", "netns"), what="SIGKILL of one trainer rank"),
    Kind("kill_agent", ("local", "farm", "netns"),
         what="SIGKILL of the node agent (`cuetrain local` / the frame process)"),
    Kind("kill_frame", ("local", "farm", "netns"),
         what="SIGKILL of a whole frame: the agent and its ranks (process group)"),
    Kind("sigstop_rank", ("local", "farm", "netns"),
         what="SIGSTOP of one rank for twice the collective timeout + 3 s, then SIGCONT"),
    Kind("sigterm_rank", ("local",), what="SIGTERM (preemption) of one rank"),
    Kind("sigterm_agent", ("local",), what="SIGTERM (preemption) of the node agent / frame"),
    # rank 0 rides a full disk out (trainer.record.storage): no exit, no new attempt; the checkpoint a full disk
    # kept out lands once the soak frees it, so a later fault resumes from it (0 steps lost)
    Kind("disk_full", ("local",), root=True, attempts=0, lost_intervals=0, rows_after_undo=True,
         what="the run directory's filesystem filled, freed 3 s later: rank 0 holds its metrics rows and checkpoint "
              "in memory and trains on"),
    # the resume takes the same step from the checkpoint's second copy (trainer.record.ckptcopies)
    Kind("truncate_ckpt", ("local", "farm"),
         what="the newest checkpoint truncated to half, then SIGKILL of a rank"),
    Kind("runjson_immutable", ("local",), root=True,
         what="run.json made unwritable (`chattr +i`), a rank SIGKILLed, writable again 3 s later"),
    Kind("second_submit", ("local",), attempts=0, lost_intervals=0,
         what="a second `cuetrain local --resume` into the live run directory"),
    Kind("cuebot_stop", ("farm",), attempts=0, lost_intervals=0, what="the Cuebot double stopped for 3 s, then back"),
    Kind("cut_host", ("netns",),
         what="a host's link cut (its bridge port down) for twice the collective timeout + 3 s, then back"),
    Kind("elastic", ("elastic",), attempts=2,  # the shrink (a restart) and the regroup at the next checkpoint
         what="frame 1 or 2 of an elastic 3-frame job loses its host (its RQD locked, the frame process SIGKILLed): "
              "the gang shrinks to 2 ranks; the host unlocked, Cuebot's retry returns and the gang grows back to 3"),
)}


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: ``kind`` at training step ``step`` [steps] against rank / frame ``target``."""

    kind: str
    step: int
    target: int


@dataclass(frozen=True)
class PlannedRun:
    """One run of the schedule: its path, index and faults (ascending steps)."""

    path: str
    index: int
    faults: tuple[Fault, ...]


def schedule(faults: int, seed: int, kinds: dict[str, list[str]], steps: int, interval: int,
             world_size: int = 2) -> list[PlannedRun]:
    """Draw ``faults`` faults over runs, round robin over the paths in ``kinds`` (path -> kind names available
    here; a path with none gets no run).

    Args:
        faults: faults in all [count]. A run draws at most one kind it trains on through (a full disk), made its
            last fault (:func:`held_faults_last`).
        seed: the ``random.Random`` seed.
        kinds: the kinds each path can do on this machine.
        steps: each run's ``--steps`` [steps].
        interval: ``--checkpoint-interval`` [steps]; faults come at steps in [2 x interval, steps - interval),
            at least 2 x interval apart.
        world_size: ranks per run; a fault's target is drawn from them.

    Raises:
        ValueError: ``steps`` leaves no room for a fault (3 checkpoint intervals or fewer), or no path has a kind.
    """
    paths = [p for p, names in kinds.items() if names]
    if not paths:
        raise ValueError("no fault kind can run here: see the notes above")
    slots = list(range(2 * interval, steps - interval, 2 * interval))
    if not slots:
        raise ValueError(f"--steps {steps} leaves no room for a fault: give more than {3 * interval}")
    rng = random.Random(seed)
    runs: list[PlannedRun] = []
    left = faults
    while left > 0:
        path = paths[len(runs) % len(paths)]
        if path == "elastic":
            drawn: tuple[Fault, ...] = (_elastic_fault(rng, kinds[path], slots[0], interval),)
        else:
            count = min(left, rng.randint(1, min(MAX_FAULTS_PER_RUN, len(slots))))
            drawn = held_faults_last(_draw(rng, kinds[path], sorted(rng.sample(slots, count)), interval, world_size))
        runs.append(PlannedRun(path, len(runs), within_cuebot_retries(path, drawn)))
        left -= len(drawn)
    return runs


def _draw(rng: random.Random, names: list[str], chosen: list[int], interval: int, world_size: int) -> tuple[Fault, ...]:
    """One fault per slot start in ``chosen`` [steps], at most one of a kind the run trains on through
    (``rows_after_undo``; :func:`held_faults_last` makes it the last)."""
    drawn: list[Fault] = []
    for s in chosen:
        held = any(KINDS[f.kind].rows_after_undo for f in drawn)
        pool = [k for k in names if not (held and KINDS[k].rows_after_undo)] or names
        drawn.append(Fault(rng.choice(pool), s + rng.randrange(interval), rng.randrange(world_size)))
    return tuple(drawn)


def held_faults_last(faults: tuple[Fault, ...]) -> tuple[Fault, ...]:
    """``faults`` (ascending steps) with the kind of a fault the run trains on through (``rows_after_undo``: a full
    disk, held :data:`soak_local.HOLD_S` while training goes on at ~50 steps/s) swapped with the last fault's kind
    and target, so no later fault of the run waits behind it: a 300-step run can reach its end during the hold,
    and a fault planned after it was then never injected (the disk_full soak, seed 2). Steps stay where drawn."""
    held = [i for i, f in enumerate(faults) if KINDS[f.kind].rows_after_undo]
    if not held or held[-1] == len(faults) - 1:
        return faults
    out = list(faults)
    i, last = held[0], len(faults) - 1
    out[i] = Fault(faults[last].kind, faults[i].step, faults[last].target)
    out[last] = Fault(faults[i].kind, faults[last].step, faults[i].target)
    return held_faults_last(tuple(out))


def _elastic_fault(rng: random.Random, names: list[str], slot: int, interval: int) -> Fault:
    """An elastic run's one fault: in the first slot (``slot`` .. ``slot + interval - 1`` [steps]), so the shrunk gang
    has the rest of the run to grow back in, against frame 1 .. :data:`ELASTIC_WORLD_SIZE` - 1 (frame 0 hosts the
    gang: an elastic gang cannot train on without it)."""
    return Fault(rng.choice(names), slot + rng.randrange(interval), 1 + rng.randrange(ELASTIC_WORLD_SIZE - 1))


def within_cuebot_retries(path: str, faults: tuple[Fault, ...]) -> tuple[Fault, ...]:
    """``faults`` with every ``kill_frame`` of a frame that Cuebot already started again in this run made a
    ``kill_agent`` of it (farm and netns; a ``local`` run is returned as it is).

    Cuebot counts every restart of a frame against the job's retries (``FrameDaoJdbc.updateFrameStarted``; the
    soak's jobs have ``max_retries=1``, the cap ``JobSpec`` allows) and retries a frame past them only for a memory
    failure (tests/cuebot/completion.py, rules 12-13). A frame process killed alone (``kill_agent``) exits 137, a
    memory failure, retried always; a frame's whole process group killed (``kill_frame``: RQD's ``/usr/bin/time``
    too) reports exit status 1, a failure that a frame retried before has no retry left for: it goes DEAD, and the job
    can never finish. The same rule as ``sigterm_agent``, which the farm path does not draw.
    """
    if path == "local":
        return faults
    restarted: set[int] = set()
    out = []
    for fault in faults:
        if fault.kind == "kill_frame" and fault.target in restarted:
            fault = Fault("kill_agent", fault.step, fault.target)
        if fault.kind in ("kill_agent", "kill_frame"):
            restarted.add(fault.target)
        out.append(fault)
    return tuple(out)


def resolve_limit_s(kind: str, collective_timeout_s: float, stop_grace_s: float, gang_timeout_s: float) -> float:
    """The documented bound on a fault's time to training again [s] (docs/failure_handling.md, "Timeouts"): noticing
    it (the collective timeout, or the lost-rank watch of 3 heartbeats + 1 s, whichever is longer; a SIGSTOP adds
    its own hold), the supervisor's SIGTERM-to-SIGKILL grace (:data:`trainer.core.timeouts.GRACE`) and a new gang
    forming (the gang timeout). A fault the soak undoes itself (disk full, run.json unwritable) adds its hold; an
    elastic gang that lost a frame waits the elastic window for it before it shrinks (its grow-back has its own
    bound, :func:`grow_limit_s`)."""
    notice = max(collective_timeout_s, 3 * HEARTBEAT_S + 1)
    hold = {"sigstop_rank": stop_hold_s(collective_timeout_s), "disk_full": 3.0, "runjson_immutable": 3.0,
            "cuebot_stop": 3.0, "cut_host": stop_hold_s(collective_timeout_s),
            "elastic": ELASTIC_WINDOW_S}.get(kind, 0.0)
    return notice + hold + GRACE.kill_after_for(["--stop-grace-s", str(stop_grace_s)]) + gang_timeout_s


def grow_limit_s(gang_timeout_s: float) -> float:
    """The bound on an elastic gang's grow-back [s], from its lost frame's host unlocked to the attempt of every rank
    in ``run.json``: :data:`GROW_HOLD_S` (the frame back, seen, the shrunk gang at its next checkpoint) and the
    regrouped gang forming (the gang timeout). No SIGTERM grace: the shrunk gang stops by itself (exit 79)."""
    return GROW_HOLD_S + gang_timeout_s


@dataclass(frozen=True)
class RunConfig:
    """The tiny run every soak run trains (the fault-free reference included).

    Attributes:
        steps: ``--steps`` [steps].
        interval: ``--checkpoint-interval`` [steps]: the bound on steps lost per fault.
        crop: ``--crop-size`` [px]; batch: ``--batch-size`` [crops, global].
        collective_timeout_s, stop_grace_s, gang_timeout_s: the trainer's timeouts [s], short for the soak.
        max_restarts: ``--max-restarts`` of ``cuetrain local`` [count]: more than a run's faults can spend.
        world_size: ranks [processes].
        seed: ``--seed`` of every run (the reference and the faulted runs train the same trajectory).
    """

    steps: int = 300
    interval: int = 25
    crop: int = 32
    batch: int = 4
    collective_timeout_s: float = 5.0
    stop_grace_s: float = 5.0
    gang_timeout_s: float = 60.0
    max_restarts: int = 20
    world_size: int = 2
    seed: int = 0

    def train_argv(self, input_dir: str, target_dir: str, run_dir: str) -> list[str]:
        """``cuetrain train`` arguments of a run in ``run_dir`` (fp32: the same numbers on every CPU)."""
        return ["--input", input_dir, "--target", target_dir, "--run-dir", run_dir, "--steps", str(self.steps),
                "--crop-size", str(self.crop), "--batch-size", str(self.batch), "--model-size", "small",
                "--checkpoint-interval", str(self.interval), "--log-interval", "5",
                "--contact-sheet-interval", str(10 * self.steps), "--precision", "fp32", "--seed", str(self.seed),
                "--collective-timeout-s", str(self.collective_timeout_s), "--stop-grace-s", str(self.stop_grace_s),
                "--gang-timeout-s", str(self.gang_timeout_s)]

    def limit_s(self, kind: str) -> float:
        """:func:`resolve_limit_s` under these timeouts [s]."""
        return resolve_limit_s(kind, self.collective_timeout_s, self.stop_grace_s, self.gang_timeout_s)

    def for_path(self, path: str) -> "RunConfig":
        """The config of a run on ``path``: an elastic run has :data:`ELASTIC_WORLD_SIZE` ranks and
        :data:`ELASTIC_CROP` px crops (the same seed, steps and timeouts); every other path this one."""
        if path != "elastic":
            return self
        return dataclasses.replace(self, world_size=ELASTIC_WORLD_SIZE, crop=ELASTIC_CROP)


@dataclass
class FaultOutcome:
    """What one fault did.

    Attributes:
        fault: the scheduled fault; path: where it ran.
        seconds: fault -> training again (the next attempt recorded in run.json; for a kind that adds no attempt,
            the next metrics row) [s]; None: training never came back.
        steps_lost: step reached at the fault - step the next attempt started from [steps].
        limit_s: the documented bound on ``seconds`` (:func:`resolve_limit_s`) [s].
        note: what the soak saw (an exit, a known gap); problem: why this fault fails its run ("" = none).
        hang: it took longer than ``limit_s``.
    """

    fault: Fault
    path: str
    seconds: float | None = None
    steps_lost: int = 0
    limit_s: float = 0.0
    note: str = ""
    problem: str = ""
    hang: bool = False
