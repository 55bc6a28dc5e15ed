"""`rolltape prompts` wiring: prompt targets read from the log (the versions, their lineage, the
champion), versions recorded by hand (a first version, a person's edit, a manual promotion), and
the prompt loop (`evolve`): planned and checked against its budget before it runs.

The pure part is rolltape.projections (`fold_prompts`); this reads and writes Kafka.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from rolltape.infra import open_monitor_recorder, open_recorder
from rolltape.infra.broker import require_connection
from rolltape.infra.index import locate_holding, locate_sessions
from rolltape.infra.judging import open_judge_runtime
from rolltape.infra.kafka.sessions import LIVE_STREAMS, SessionScan, read_sessions, scan_sessions
from rolltape.infra.settings import Settings
from rolltape.producers import PromptLoopError, Session, rules_and_verdicts_follower
from rolltape.producers.agent import DEFAULT_MODEL
from rolltape.producers.environments import (
    ENV_SCORE_JUDGE,
    Environment,
    EnvironmentTester,
    environment_names,
    environment_suite,
    load_environment,
)
from rolltape.producers.prompts import (
    REVIEW_MODEL,
    Case,
    LoopEstimate,
    LoopResult,
    PromptLoop,
    RoundResult,
    Suite,
    Tester,
    Tuner,
    estimate,
    judge_reviewer,
)
from rolltape.projections import (
    PROMPT_EVENT_TYPES,
    Decided,
    FoldError,
    Narrowing,
    PromptLookupError,
    PromptTarget,
    fold,
    fold_prompts,
)
from rolltape.schemas import (
    HUMAN_JUDGE_VERSION,
    LIVE_JUDGE_VERSION,
    POLICY_PROMPT_TARGET,
    PromotionRule,
    PromptDecision,
    PromptPromotion,
    PromptVersion,
    Role,
    Stream,
    TypedEvent,
    Verdict,
    versioned_stream,
)

__all__ = [
    "Case",
    "Decided",
    "EvolvePlan",
    "LoopTarget",
    "PromotionRule",
    "PromptLookupError",
    "PromptTarget",
    "RoundResult",
    "ValidationError",
    "check_evolve",
    "choose_suite",
    "chosen_version",
    "evolve",
    "history_of",
    "judged_round",
    "loop_target",
    "plan_evolve",
    "prompt_for",
    "prompt_targets",
    "read_prompt_targets",
    "record_version",
    "rejudge",
    "reviewed_standing",
    "verdicts_of",
]


async def prompt_targets(
    settings: Settings, *, say: Callable[[str], None] | None = None
) -> dict[str, PromptTarget]:
    """Every prompt target the log holds, with its history: read from the sessions the read
    model says hold prompt events (and the tail it has not indexed), else by a scan of the
    events topic, saying why to `say`; both ways give the same targets."""
    connection = require_connection(settings, Role.READER)
    located = await locate_holding(settings, connection, PROMPT_EVENT_TYPES, say=say)
    scan = SessionScan(keeps=lambda env: env.type in PROMPT_EVENT_TYPES)
    with await scan_sessions(
        connection, [Stream.EVENTS], scan, prefix=settings.topic_prefix, located=located
    ) as scanned:
        pairs = [(s.session_id, e) for s in scanned.sessions() for e in s.events]
    return fold_prompts(pairs)


def read_prompt_targets(settings: Settings) -> dict[str, PromptTarget]:
    """`prompt_targets`, read now."""
    return asyncio.run(prompt_targets(settings))


def history_of(targets: dict[str, PromptTarget], name: str) -> PromptTarget:
    """The history of target `name` among `targets` (PromptLookupError saying how to record a
    first version when there is none)."""
    found = targets.get(name)
    if found is None:
        known = ", ".join(targets) or "none yet"
        raise PromptLookupError(
            f"the log holds no prompt target {name!r} (targets: {known}); record a first "
            f"version with `rolltape prompts add {name} --file FILE --promote 'initial'`"
        )
    return found


def judged_round(history: PromptTarget, number: int | None = None) -> tuple[int, Decided]:
    """Judged round `number` of the target (from 1, in log order; default: the last) and its
    number (PromptLookupError when there is no such round)."""
    rounds = history.rounds()
    if not rounds:
        raise PromptLookupError(
            f"no round of {history.name} was judged yet: run `rolltape prompts evolve`"
        )
    chosen = len(rounds) if number is None else number
    if not 1 <= chosen <= len(rounds):
        raise PromptLookupError(
            f"{history.name} has rounds 1 to {len(rounds)} in the log, not {chosen}"
        )
    return chosen, rounds[chosen - 1]


def record_version(
    settings: Settings,
    history: PromptTarget,
    content: str,
    *,
    parents: Sequence[str] = (),
    technique: str | None = None,
    rationale: str | None = None,
    promote: str | None = None,
) -> tuple[PromptVersion, PromptPromotion | None]:
    """Record a version of `history`'s target (parents by label or digest, default: the
    champion when there is one), and with `promote` (the reason) a promotion making it the
    champion. A version already recorded is recorded again under the same digest: the log keeps
    who recorded it when; its label stays the first one."""
    refs = list(parents) or (["champion"] if history.champion is not None else [])
    version = PromptVersion.of(
        history.name,
        content,
        parents=tuple(dict.fromkeys(history.find(ref).version.digest for ref in refs)),
        technique=technique,
        rationale=rationale,
    )
    promotion = None
    if promote is not None:
        champion = history.champion
        promotion = PromptPromotion(
            target=history.name,
            version=version.digest,
            replaces=champion.version.digest if champion is not None else None,
            reason=promote,
        )
    with _recorded(settings, f"prompt versions of {history.name}", history.name) as session:
        session.record(version)
        if promotion is not None:
            session.record(promotion)
    return version, promotion


@contextmanager
def _recorded(
    settings: Settings,
    task: str,
    target: str,
    *,
    kind: str = "",
    run_config: dict[str, Any] | None = None,
) -> Iterator[Session]:
    """An untrainable session of the agent's principal for what a prompts command records
    (`prompts.<target>.<kind-><id>`), flushed before it returns."""
    recorder = open_recorder(settings)
    try:
        with recorder.session(
            task,
            session_id=f"prompts.{target}.{kind}{uuid.uuid4().hex[:12]}",
            trainable=False,
            tags=["prompts", *([f"prompt_{kind.rstrip('-')}"] if kind else []), f"target={target}"],
            run_config=run_config,
        ) as session:
            yield session
    finally:
        recorder.close(60)


@dataclass(frozen=True)
class LoopTarget:
    """What the loop needs to know of a target before it runs: the prompt as shipped, the
    default suite, the case names a suite may use, the logical model its test runs call, and
    the most model calls one test run makes."""

    name: str
    base: str
    """The prompt as shipped (the version a loop starts from without --resume-from-champion)."""
    suite: Suite
    cases: frozenset[str]
    model: str
    calls_per_run: Callable[[Suite, int | None], int]
    environment: Environment | None = None


class EvolvePlan(BaseModel):
    """A prompt loop ready to run: its target, where it starts, its suite and what it may cost
    at most (checked against the budget before anything runs)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    target: str
    loop: LoopTarget
    start: PromptVersion
    start_label: str
    rounds: int
    suite: Suite
    rule: PromotionRule
    epochs: int | None
    estimate: LoopEstimate
    labels: dict[str, str]
    scoreboard: tuple[str, ...]
    review: bool = False
    """An LLM reviewer (ROLLTAPE_MODELS `reviewer`) gives each round a verdict too."""


def loop_target(target: str) -> LoopTarget:
    """The harness's policy (`harness.policy`) or a registered environment's system prompt
    (`env.<name>.system`); PromptLoopError naming what can be evolved otherwise."""
    if target == POLICY_PROMPT_TARGET:
        from rolltape.producers.training import (
            BASE_POLICY_PROMPT,
            DEFAULT_SUITE,
            SCENARIOS,
            max_policy_calls,
        )

        return LoopTarget(
            name=target,
            base=BASE_POLICY_PROMPT,
            suite=DEFAULT_SUITE,
            cases=frozenset(SCENARIOS),
            model="policy",
            calls_per_run=lambda suite, epochs: max_policy_calls(epochs, suite),
        )
    name = target.removeprefix("env.").removesuffix(".system")
    if target == f"env.{name}.system" and name in environment_names():
        env = load_environment(name)
        if env.system_prompt is None:
            raise PromptLoopError(f"environment {name} has no system prompt to evolve")
        return LoopTarget(
            name=target,
            base=env.system_prompt,
            suite=environment_suite(env),
            cases=frozenset(i.item_id for split in ("train", "test") for i in env.items(split)),
            model=DEFAULT_MODEL,
            calls_per_run=lambda suite, epochs: env.max_iterations,
            environment=env,
        )
    evolvable = ", ".join([POLICY_PROMPT_TARGET, *(f"env.{n}.system" for n in environment_names())])
    raise PromptLoopError(f"{target!r} cannot be evolved: the loop runs {evolvable}")


def choose_suite(loop: LoopTarget, learn: Sequence[Case], heldout: Sequence[Case]) -> Suite:
    """The suite of the cases given; a side given none takes the default suite's cases whose
    names the other side does not use. ValueError (pydantic's) for a suite `Suite` refuses."""
    if not learn:
        names = {c.name for c in heldout}
        learn = tuple(c for c in loop.suite.learn if c.name not in names)
    if not heldout:
        names = {c.name for c in learn}
        heldout = tuple(c for c in loop.suite.heldout if c.name not in names)
    return Suite(learn=tuple(learn), heldout=tuple(heldout))


def check_evolve(
    settings: Settings, target: str, suite: Suite | None, *, review: bool = False
) -> LoopTarget:
    """What can be checked before the log is read: a target the loop can test, the `tuner`
    endpoint and the one its test runs call, the worker's reward function an environment's runs
    are scored by, and cases the target has; PromptLoopError saying what to change."""
    loop = loop_target(target)
    for role in ("tuner", loop.model, *([REVIEW_MODEL] if review else [])):
        if role not in settings.models:
            raise PromptLoopError(
                f"the prompt loop of {target} needs an endpoint for the logical model {role!r}: "
                'set ROLLTAPE_MODELS, e.g. \'{"tuner": {"base_url": "http://host:8000/v1", '
                f'"model": "m"}}, "{loop.model}": {{...}}}}\''
            )
    if loop.environment is not None and "final_reward" not in settings.rewards:
        raise PromptLoopError(
            f"{target}'s test rollouts are scored by the worker's {ENV_SCORE_JUDGE} verdicts: "
            "set ROLLTAPE_REWARDS='[\"final_reward\"]' for the worker (and here)"
        )
    if suite is not None:
        unknown = sorted({c.name for c in (*suite.learn, *suite.heldout)} - loop.cases)
        if unknown:
            what = "harness scenario" if loop.environment is None else "item of the environment"
            raise PromptLoopError(
                f"{', '.join(unknown)}: not a {what} (known: {', '.join(sorted(loop.cases))})"
            )
    return loop


def plan_evolve(
    settings: Settings,
    history: PromptTarget | None,
    target: str,
    *,
    rounds: int,
    resume_from_champion: bool = False,
    budget_calls: int | None = None,
    suite: Suite | None = None,
    epochs: int | None = None,
    rule: PromotionRule | None = None,
    review: bool = False,
    from_base: bool = False,
) -> EvolvePlan:
    """Check what a loop needs (`check_evolve`, and a champion to resume from) and that its
    estimate fits `budget_calls`; PromptLoopError with what to change otherwise. A loop starts
    from the prompt as shipped, or from the champion (`resume_from_champion`); when the log's
    champion is another version, starting from the prompt as shipped needs `from_base`: a win
    then replaces a champion it was never measured against."""
    rule = rule or PromotionRule()
    review = review or rule.review_veto
    loop = check_evolve(settings, target, suite, review=review)
    suite = suite or loop.suite
    if resume_from_champion:
        champion = history.champion if history is not None else None
        if champion is None:
            raise PromptLoopError(
                f"{target} has no champion to resume from (nothing was promoted): run without "
                "--resume-from-champion to start from the prompt as shipped"
            )
        start, start_label = champion.version, champion.label
    else:
        start = PromptVersion.of(
            target, loop.base, technique="base", rationale="the prompt as shipped"
        )
        start_label = history.label_of(start.digest) if history is not None else "base"
        champion = history.champion if history is not None else None
        if champion is not None and champion.version.digest != start.digest and not from_base:
            raise PromptLoopError(
                f"{target}'s champion is {champion.label}, not the prompt as shipped: pass "
                "--resume-from-champion to start from it, or --from-base to start from the "
                f"prompt as shipped (a win would then replace {champion.label} without having "
                "been measured against it)"
            )
    bound = estimate(suite, loop.calls_per_run(suite, epochs), rounds, review=review)
    if budget_calls is not None and bound.model_calls > budget_calls:
        raise PromptLoopError(
            f"the loop may make {bound.describe()}, over --budget-calls {budget_calls}: lower "
            "--rounds or --epochs, or raise the budget"
        )
    return EvolvePlan(
        target=target,
        loop=loop,
        start=start,
        start_label=start_label,
        rounds=rounds,
        suite=suite,
        rule=rule,
        epochs=epochs,
        estimate=bound,
        labels={r.version.digest: r.label for r in history.versions} if history else {},
        scoreboard=tuple(
            f"{t.technique}: {t.wins} win(s), {t.losses} loss(es)"
            for t in (history.scoreboard() if history is not None else [])
        ),
        review=review,
    )


def evolve(
    settings: Settings,
    plan: EvolvePlan,
    *,
    on_round: Callable[[RoundResult], None] | None = None,
) -> LoopResult:
    """Run the planned loop (a worker must be judging: the testers wait for its verdicts)."""
    loop = plan.loop
    agent = open_recorder(settings)
    monitor = open_monitor_recorder(settings) if loop.environment is None else None
    follower = rules_and_verdicts_follower(
        require_connection(settings, Role.MONITOR), settings.topic_prefix
    )
    endpoint = settings.models[loop.model]
    try:
        tester: Tester
        if loop.environment is not None:
            tester = EnvironmentTester(
                loop.environment,
                endpoint=endpoint,
                recorder=agent,
                follower=follower,
                judges=lambda: open_judge_runtime(settings, recorder=agent, policy=endpoint),
            )
        else:
            from rolltape.producers.training import HarnessTester

            assert monitor is not None
            tester = HarnessTester(
                endpoint=endpoint,
                agent=agent,
                monitor_recorder=monitor,
                follower=follower,
                suite=plan.suite,
                epochs=plan.epochs,
            )
        runner = PromptLoop(
            agent,
            Tuner(settings.models["tuner"], agent),
            tester,
            target=plan.target,
            suite=plan.suite,
            rule=plan.rule,
            labels=plan.labels,
            scoreboard=plan.scoreboard,
            reviewer=(
                judge_reviewer(lambda: open_judge_runtime(settings, recorder=agent))
                if plan.review
                else None
            ),
        )
        return runner.run(plan.start, plan.rounds, on_round=on_round)
    finally:
        follower.close()
        if monitor is not None:
            monitor.close()
        agent.close(60)


async def verdicts_of(
    settings: Settings, session_ids: set[str], judge: str, judge_version: str
) -> dict[str, Verdict]:
    """`judge`'s verdicts on `session_ids` under `judge_version` (the live worker's, or a
    replay's), by session id; the last one read per session wins."""
    wanted = versioned_stream(Stream.VERDICTS, judge_version)

    def keeps(env: TypedEvent) -> bool:
        return (
            env.stream == wanted
            and env.type == "verdict"
            and env.session_id in session_ids
            and env.payload.get("judge") == judge
        )

    connection = require_connection(settings, Role.READER)
    found: dict[str, Verdict] = {}
    with await scan_sessions(
        connection, [Stream.VERDICTS], SessionScan(keeps), prefix=settings.topic_prefix
    ) as scanned:
        for session in scanned.sessions():
            for env in [*session.events, *session.derived]:
                if isinstance(env.body, Verdict):
                    found[session.session_id] = env.body
    return found


async def rejudge(
    settings: Settings,
    history: PromptTarget,
    judge_version: str,
    *,
    rounds: Sequence[int] = (),
    record: bool = False,
) -> list[tuple[PromptDecision, PromptDecision]]:
    """(as judged, as re-judged) for the target's rounds (numbered in log order; all when
    `rounds` is empty): each decided again from the verdicts `judge_version` gave the same test
    sessions (`rolltape log replay --judge-version V` writes them), by its recorded scoring and
    rule; `human` decides them from the reviewers' verdicts on those sessions instead
    (`PromptDecision.reviewed_again`). With `record`, the re-judged decisions are recorded (they
    change no champion)."""
    if judge_version == LIVE_JUDGE_VERSION:
        raise PromptLookupError(
            f"the rounds were judged on the {LIVE_JUDGE_VERSION!r} verdicts already: name the "
            "judge version a replay wrote (`rolltape log replay --judge-version V`)"
        )
    judged = history.rounds()
    unknown = [n for n in rounds if not 1 <= n <= len(judged)]
    if not judged or unknown:
        raise PromptLookupError(
            f"{history.name} has {len(judged)} judged round(s) in the log; "
            + (f"no round {', '.join(map(str, unknown))}" if unknown else "run a loop first")
        )
    chosen = [judged[n - 1].decision for n in rounds] if rounds else [d.decision for d in judged]
    if judge_version == HUMAN_JUDGE_VERSION:
        out = await _reviewed_again(settings, chosen)
    else:
        out = await _rejudged(settings, chosen, judge_version)
    if record:
        with _recorded(
            settings,
            f"prompt rounds of {history.name} re-judged under {judge_version}",
            history.name,
            kind="rejudge-",
            run_config={"judge_version": judge_version},
        ) as session:
            for _, again in out:
                session.prompt_decision(again.model_dump(mode="json"))
    return out


async def _rejudged(
    settings: Settings, chosen: Sequence[PromptDecision], judge_version: str
) -> list[tuple[PromptDecision, PromptDecision]]:
    verdicts: dict[str, dict[str, Verdict]] = {}
    for judge in sorted({d.scoring.judge for d in chosen}):
        sessions = {
            sid
            for d in chosen
            if d.scoring.judge == judge
            for p in d.pairs
            for sid in (p.champion_session, p.proposal_session)
            if sid is not None
        }
        verdicts[judge] = await verdicts_of(settings, sessions, judge, judge_version)
        if not verdicts[judge]:
            raise PromptLookupError(
                f"the log holds no {judge} verdicts of judge version {judge_version!r} on these "
                f"rounds' {len(sessions)} test sessions: run `rolltape log replay --judge-version "
                f"{judge_version}` first"
            )
    out = [(d, d.rejudged(verdicts[d.scoring.judge], judge_version)) for d in chosen]
    return out


async def _reviewed_again(
    settings: Settings, chosen: Sequence[PromptDecision]
) -> list[tuple[PromptDecision, PromptDecision]]:
    sessions = {
        sid
        for d in chosen
        for p in d.pairs
        for sid in (p.champion_session, p.proposal_session)
        if sid is not None
    }
    standing = await reviewed_standing(settings, sessions)
    if not standing:
        raise PromptLookupError(
            f"no reviewer has judged these rounds' {len(sessions)} test sessions: review them "
            "(`rolltape review record SESSION pass|fail`, or the console's session page) first"
        )
    return [(d, d.reviewed_again(standing)) for d in chosen]


async def reviewed_standing(
    settings: Settings, session_ids: set[str]
) -> dict[str, tuple[float, bool]]:
    """What reviewers said of each of `session_ids` that one judged: (the mean of each
    reviewer's standing score, whether most of them passed it), read from the reviewers'
    chains with the session as the export folds it (`Trajectory.human_score`,
    `reviewers_passed`; a review counts only for the login that wrote it)."""
    connection = require_connection(settings, Role.READER)
    located = await locate_sessions(
        settings, connection, LIVE_STREAMS, Narrowing(sessions=tuple(sorted(session_ids)))
    )
    found = await read_sessions(
        connection, settings.topic_prefix, keys_from=settings, located=located
    )
    standing: dict[str, tuple[float, bool]] = {}
    for sid in sorted(session_ids & found.keys()):
        events = found[sid]
        own = [e for e in events if e.stream == Stream.EVENTS.value]
        derived = [e for e in events if e.stream != Stream.EVENTS.value]
        if not own:
            continue
        try:
            trajectory = fold(own, derived)
        except FoldError:
            continue  # sealed or unfoldable: its pair stays unscored, as for a missing verdict
        score = trajectory.human_score
        if score is not None:
            standing[sid] = (score, trajectory.reviewers_passed is True)
    return standing


def chosen_version(
    targets: dict[str, PromptTarget], target: str, ref: str
) -> tuple[PromptVersion | None, str]:
    """The version of `target` that `ref` names (a label, a digest prefix; `champion`: the log's
    champion, or None when there is none; `base`: None, the prompt as shipped), and a line
    saying which. PromptLookupError for a version the log does not hold."""
    history = targets.get(target)
    if ref == "base":
        return None, f"{target}: the prompt as shipped"
    if ref == "champion" and (history is None or history.champion is None):
        return None, f"{target} has no champion in the log: the prompt as shipped"
    if history is None:
        raise PromptLookupError(
            f"the log holds no versions of {target}, so {ref!r} names nothing: use `base`, or "
            "record one with `rolltape prompts add`"
        )
    recorded = history.find(ref)
    return recorded.version, f"{target} {recorded.label} ({recorded.version.digest[:12]})"


async def prompt_for(settings: Settings, target: str, ref: str) -> tuple[PromptVersion | None, str]:
    """`chosen_version` over the log read now (nothing is read for `base`)."""
    if ref == "base":
        return chosen_version({}, target, ref)
    return chosen_version(await prompt_targets(settings), target, ref)
