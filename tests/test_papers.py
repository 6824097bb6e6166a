"""A folder per paper under core/, and docs/design.md's "Adding a paper" list held to the code: each
paper's `__init__.py` docstring is its map (its files, then every other place the list names), and
each place it gives exists and names the paper."""

import importlib
import os
import re

import pytest

from conftest import ROOT

FOLDERS = ("unilm", "mlae", "elmer")


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def design_places():
    """The places of design.md's "Adding a paper" paragraph: its list's bold words, in order."""
    text = read("docs/design.md")
    start = text.index("**Adding a paper.**")
    block = text[start : text.index("\n## ", start)]
    return re.findall(r"^\* \*\*(\w+)\*\*", block, re.M)


def paper_map(folder):
    """(name, {"files": {file: text}, place: text}) of the map in core/FOLDER/__init__.py."""
    doc = importlib.import_module(f"core.{folder}").__doc__
    name = doc.split(":", 1)[0]
    sections, key = {}, None
    for line in doc.splitlines():
        if re.fullmatch(r"\w+:", line.strip()) and not line.startswith(" "):
            key = line.strip()[:-1].lower()
            sections[key] = {}
        elif key and line.strip():
            m = re.match(r"  (\S+)\s+(.*)", line)
            if m and not line.startswith("   "):
                item = m.group(1)
                sections[key][item] = m.group(2)
            elif sections[key]:
                sections[key][item] += " " + line.strip()
    return name, sections


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_map_lists_every_place_design_md_names(folder):
    places = design_places()
    assert places[0] == "folder" and len(places) > 1, places
    name, sections = paper_map(folder)
    assert set(sections) == {"files", "elsewhere"}, sections.keys()
    assert list(sections["elsewhere"]) == places[1:], f"core/{folder}/__init__.py: {list(sections['elsewhere'])}"


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_folder_holds_the_files_its_map_lists(folder):
    _, sections = paper_map(folder)
    here = sorted(f for f in os.listdir(os.path.join(ROOT, "core", folder)) if f.endswith(".py") and f != "__init__.py")
    assert sorted(sections["files"]) == here


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_place_exists_and_names_the_paper(folder):
    name, sections = paper_map(folder)
    places = sections["elsewhere"]
    bad = []
    # records: each NAMES "key" exists in its module, and the module imports the paper's folder
    for module, table, keys in re.findall(r"(core/\w+\.py) (\w+) ((?:\"[\w-]+\"(?:, )?)+)", places["records"]):
        dotted = module[:-3].replace("/", ".")
        records = getattr(importlib.import_module(dotted), table)
        bad += [f"{dotted}.{table} has no {k}" for k in re.findall(r'"([\w-]+)"', keys) if k not in records]
        if not re.search(rf"^from \.{folder}\b", read(module), re.M):
            bad.append(f"{module} imports nothing of core/{folder}/")
    # kernels: none, or files that exist and name the paper
    kernels = re.findall(r"kernels/\w+\.py", places["kernels"])
    assert kernels or places["kernels"].startswith("none"), places["kernels"]
    bad += [f"{k} does not name {name}" for k in kernels if name not in read(k)]
    # claims: each paper label it gives is one of reproduce/plan.py's orderings
    from reproduce.orderings import ORDERINGS

    labels = {o[0] for o in ORDERINGS}
    claims = re.findall(r'"([^"]+)"', places["claims"])
    assert claims, places["claims"]
    bad += [
        f"no ordering of {c!r} in reproduce/plan.py"
        for c in claims
        if not any(label == c or label.startswith(c + " ") for label in labels)
    ]
    # docs: the page is titled by the paper's name and points at the folder
    (page,) = re.findall(r"docs/\w+\.md", places["docs"])
    text = read(page)
    if not text.startswith(f"# {name}"):
        bad.append(f"{page} is not titled {name}")
    if f"core/{folder}/" not in text:
        bad.append(f"{page} names no file of core/{folder}/")
    # tests: each imports the folder
    tests = re.findall(r"tests/\w+\.py", places["tests"])
    assert tests, places["tests"]
    bad += [f"{t} imports nothing of core/{folder}/" for t in tests if f"core.{folder}" not in read(t)]
    assert not bad, "\n".join(bad)


def test_every_paper_of_the_plan_has_its_folder():
    """Each paper whose claims reproduce/plan.py holds has a folder under core/ whose map names it."""
    from reproduce.orderings import ORDERINGS

    papers = {o[0].split()[0] for o in ORDERINGS}
    assert papers == {paper_map(f)[0] for f in FOLDERS}
