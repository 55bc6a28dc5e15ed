"""When `export --evidence` leaves sessions out for want of a signed checkpoint, the hint names
the cause this machine can see: no judge key at all (so nothing was ever signed), or a key that
no running worker has signed these sessions with."""

from __future__ import annotations

from pathlib import Path

from rolltape.infra.commands.export import no_checkpoint_hint
from rolltape.infra.keys import judge_key
from rolltape.infra.settings import Settings


def test_no_checkpoint_hint__without_a_judge_key_says_there_is_none_and_how_to_create_it(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path, judge_key_file=None)
    hint = no_checkpoint_hint(settings, 3)
    assert hint.startswith("3 session(s) were left out")
    assert f"no judge key at {judge_key(settings).path}" in hint
    assert "`rolltape keys init`" in hint and "`rolltape broker up`" in hint


def test_no_checkpoint_hint__with_a_judge_key_names_it_and_points_at_the_worker(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path, judge_key_file=None)
    kid = judge_key(settings).create()
    hint = no_checkpoint_hint(settings, 1)
    assert f"the judge key {kid} exists" in hint and "no worker signed them" in hint
    assert "`rolltape serve worker`" in hint and "keys init" not in hint
