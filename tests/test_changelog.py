"""A default changed in code is a default named in CHANGELOG.md: every script flag's and budget
field's default against results/defaults.json, the defaults as of its entry (tools/defaults.py)."""

import json

from tools import defaults  # noqa: E402


def test_every_changed_default_is_in_the_changelog():
    missing, entry = defaults.unnamed_changes()
    assert not missing, (
        f"defaults changed since the CHANGELOG entry of {entry} and not named in a newer one: "
        + "; ".join(f"{k}: {old!r} -> {now!r}" for k, old, now in missing)
    )


def test_an_unnamed_change_is_caught(tmp_path, monkeypatch):
    recorded = dict(defaults=defaults.current(), entry=defaults.newest_entry()[0])  # as if written today
    some = sorted(k for k in recorded["defaults"] if k.startswith("finetune.py"))[0]
    recorded["defaults"][some] = "something else"  # a default changed since, and no entry newer than the record
    path = tmp_path / "defaults.json"
    path.write_text(json.dumps(recorded))
    monkeypatch.setattr(defaults, "PATH", str(path))
    assert [k for k, _, _ in defaults.unnamed_changes()[0]] == [some]
