"""The docs site as a reader sees it: built, served on 127.0.0.1, opened in Chromium.

The browser is Debian's ``chromium`` (``make docs-deps`` installs it), driven by
Playwright's Python package; nothing is downloaded. Without it these tests FAIL:
the site is part of what CI checks. Screenshots of every page go to
``build/docs-site-screenshots/`` (or ``$SLURM_FSM_ARTIFACTS/docs-site-screenshots``),
printed at the end of the run.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import pytest

from slurm_fsm.step0.table import EDGES, DiagramPart, State
from slurm_fsm_dev.docgen import PUBLIC_MODULES, states_dot, states_svg

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RESULTS = REPO / "benchmarks" / "results.json"
CHROMIUM = "/usr/bin/chromium"
#: The flags this machine's Chromium needs to start cleanly with no network.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
_ENTRY = re.compile(r"^::: *(\S+)", re.M)
#: A Sphinx role as a page would show it unrendered (``:class:`` then the name).
RAW_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const|type):\s*`?\w")


def _load_path(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


# ----------------------------------------------------------------- without a browser


def _arrow_ids(svg_or_dot: str) -> list[int]:
    """The edge indices of the arrows (``edge-3``, ``edge-4+5`` for a shared arrow)."""
    ids = re.findall(r'id="edge(?:&#45;|-)([0-9+]+)"', svg_or_dot)
    return [int(i) for group in ids for i in group.split("+")]


def test_diagram_has_every_state_and_every_edge() -> None:
    """Across its drawings (issue 41 item 6: the core, then each opt-in part)."""
    svgs = [states_svg(part=part) for part in DiagramPart]
    for state in State:
        assert any(f'id="state&#45;{state.value}"' in svg for svg in svgs), state
        assert any(f">{state.value}</text>" in svg for svg in svgs), state
    assert sorted(i for svg in svgs for i in _arrow_ids(svg)) == list(range(len(EDGES)))
    for svg in svgs:
        assert "<?xml" not in svg and "<!DOCTYPE" not in svg  # inlined in the page


def test_diagram_draws_the_fail_fan_in_from_one_box() -> None:
    dot = states_dot(part=DiagramPart.CORE)
    fail = [i for i, e in enumerate(EDGES) if e.source == "*"]
    assert fail
    assert re.search(rf'"__any__" -> "Failed" \[id="edge-{"[+]".join(map(str, fail))}"', dot)


def test_diagram_fails_loudly_without_graphviz() -> None:
    from slurm_fsm_dev.docgen import DiagramError

    with pytest.raises(DiagramError, match="graphviz"):
        states_svg("dot-that-is-not-installed")


def test_sphinx_roles_become_links_or_code() -> None:
    from slurm_fsm_dev.griffe_roles import roles_to_refs

    known = {"JobSpec": "slurm_fsm.spec.JobSpec", "Plan": "slurm_fsm.plan.Plan"}
    text = ("A :class:`JobSpec`, :attr:`Plan.waits_for`, :meth:`~slurm_fsm.x.Y.z`, "
            ":func:`nowhere`, :class:`the spec <JobSpec>`.")
    def resolve(target: str) -> str | None:
        head, dot, rest = target.partition(".")
        if head in known:
            return known[head] + dot + rest
        return target if "." in target else None

    out = roles_to_refs(text, resolve)
    assert '<autoref identifier="slurm_fsm.spec.JobSpec" optional><code>JobSpec</code>' in out
    assert ('<autoref identifier="slurm_fsm.plan.Plan.waits_for" optional>'
            "<code>Plan.waits_for</code>") in out
    assert '<autoref identifier="slurm_fsm.x.Y.z" optional><code>z</code>' in out
    assert ", <code>nowhere</code>," in out  # unresolved: the name in code, no role
    assert "<code>the spec</code>" in out
    assert not RAW_ROLE.search(re.sub(r"<[^>]+>", "", out))


def test_table_code_pipes_are_unescaped_for_the_site() -> None:
    hooks = _load_path("docs_hooks", REPO / "scripts" / "docs_hooks.py")
    md = "| a (`run 2>&1 \\| head -1`) | b |\ntext `x \\| y`\n"
    assert hooks.unescape_table_code(md) == "| a (`run 2>&1 | head -1`) | b |\ntext `x \\| y`\n"


def test_every_public_name_has_an_api_entry() -> None:
    """A name in a public module's ``__all__`` is one ``::: path`` line of an API page."""
    entries = {m.group(1): page.name for page in sorted((DOCS / "api").glob("*.md"))
               for m in _ENTRY.finditer(page.read_text())}
    documented = {id(_resolve(path)) for path in entries}
    missing = []
    for mod_name in PUBLIC_MODULES:
        mod = importlib.import_module(mod_name)
        for name in mod.__all__:
            if not name.startswith("__") and id(getattr(mod, name)) not in documented:
                missing.append(f"{mod_name}.{name}")
    assert not missing, f"no entry in docs/api/*.md for {missing}"


def test_every_api_page_is_in_the_nav() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    for page in (DOCS / "api").glob("*.md"):
        assert f"api/{page.name}" in nav, page


def test_the_procedure_the_docs_cite_is_a_page_of_the_site() -> None:
    """The pages cite procedure.md (the spec); the site had no such page. It is one now,
    naming its source, and every citation on a page links to it."""
    nav = (REPO / "mkdocs.yml").read_text()
    assert re.search(r"^  - .*: procedure\.md$", nav, re.M)
    page = (DOCS / "procedure.md").read_text()
    assert page.startswith("# ") and '!!! note "Source"' in page.split("\n## ", 1)[0]
    assert "../shared/docs/procedure.md" in page
    shared = REPO.parent / "shared" / "docs" / "procedure.md"
    if shared.is_file():  # beside the checkout: the page is that file, with the note
        body = [ln for ln in page.splitlines() if not ln.startswith(("!!! note", "    "))]
        src = [ln for ln in shared.read_text().splitlines() if not ln.startswith("    ")]
        assert [ln for ln in body if ln] == [ln for ln in src if ln]
    for md in sorted(DOCS.glob("*.md")):
        if md.name == "procedure.md":
            continue
        text = md.read_text()
        bare = re.findall(r"(?<!\[)procedure\.md(?!\]\(procedure\.md\))(?!\))", text)
        assert not bare, f"{md.name} cites procedure.md without linking the page"


def test_readme_links_the_main_pages() -> None:
    readme = (REPO / "README.md").read_text()
    top = readme[:readme.index("## ")]
    links = re.findall(r"\]\((docs/[^)#]+)\)", top)
    for page in ("docs/states.md", "docs/api/index.md", "docs/notebooks/stepping.ipynb",
                 "docs/spec.md", "docs/testing.md", "docs/benchmarks.md"):
        assert page in links, page
    for link in links:
        assert (REPO / link).is_file(), link


def test_hooks_keep_pages_offline() -> None:
    hooks = _load_path("docs_hooks", REPO / "scripts" / "docs_hooks.py")
    from mkdocs.exceptions import PluginError

    ok = '<script src="../assets/x.js"></script><a href="https://example.org/">a link</a>'
    assert hooks.offline(ok, "p.md") == ok
    for bad in ('<script src="https://cdn.example/x.js"></script>',
                '<link rel="stylesheet" href="//fonts.example/css">',
                '<img alt="" src="http://example.org/a.png">',
                '<script>import("https://cdn.example/m.mjs")</script>'):
        with pytest.raises(PluginError, match="another host"):
            hooks.offline(bad, "p.md")
    nb = ('<!-- Load mathjax -->\n<script src=""> </script>\n<!-- End of mathjax configuration -->'
          '<script type="module">\n const m = await import("https://cdnjs.example/mermaid.esm.min.mjs");'
          '\n</script><p>kept</p>')
    assert hooks.offline(nb, "nb.ipynb") == "<p>kept</p>"


def test_benchmark_page_has_a_marker_per_chart() -> None:
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import charts
    finally:
        sys.path.remove(str(REPO))
    figs = json.loads(RESULTS.read_text())["figures"]
    names = charts.available(figs)
    assert set(names) == set(charts.CHARTS), "results.json lacks a charted figure"
    page = (DOCS / "benchmarks.md").read_text()
    for name in names:
        assert charts.marker(name) in page, f"run benchmarks/run.py --render-docs ({name})"
    # a figure that failed is not charted (its marker would break the build)
    broken = {**figs, "series": {**figs["series"], "error": "boom"}}
    assert "per-job" not in charts.available(broken)


# --------------------------------------------------------------------- in a browser


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _report(config: pytest.Config, line: str) -> None:
    """A line on the terminal, also under -q and output capture (timings, where shots are)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    out = tmp_path_factory.mktemp("site")
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    _report(pytestconfig, f"docs site built in {time.monotonic() - start:.1f} s")
    return out


@pytest.fixture(scope="module")
def base_url(site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def screenshots(pytestconfig: pytest.Config) -> Path:
    root = Path(os.environ.get("SLURM_FSM_ARTIFACTS", REPO / "build"))
    out = root / "docs-site-screenshots"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    _report(pytestconfig, f"docs site screenshots: {out}")
    return out


@pytest.fixture(scope="module")
def browser(pytestconfig: pytest.Config) -> Iterator[Any]:
    if shutil.which("chromium") is None or not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is not installed: run `make docs-deps` (as root); "
                    "the docs site is tested in a real browser")
    from playwright.sync_api import sync_playwright

    start = time.monotonic()
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
    _report(pytestconfig, f"docs site browser tests took {time.monotonic() - start:.1f} s")


class Visit:
    """One page in a fresh browser context: what it logged and what it asked for."""

    def __init__(self, browser: Any, base_url: str, shots: Path) -> None:
        self.base = base_url
        self.shots = shots
        self.context = browser.new_context(viewport={"width": 1280, "height": 900},
                                           color_scheme="light")
        self.errors: list[str] = []
        self.foreign: list[str] = []
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("response", self._response)

    def _route(self, route: Any) -> None:
        host = urlsplit(route.request.url).hostname
        if host == "127.0.0.1":
            route.continue_()
        else:
            self.foreign.append(route.request.url)
            route.abort()

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(f"console: {msg.text} ({msg.location.get('url')})")

    def _response(self, response: Any) -> None:
        if response.status >= 400:
            self.errors.append(f"HTTP {response.status}: {response.url}")

    def open(self, path: str) -> Any:
        self.page.goto(self.base + path, wait_until="networkidle")
        return self.page

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def close(self) -> None:
        self.context.close()
        assert not self.foreign, f"requests left 127.0.0.1: {self.foreign}"
        assert not self.errors, f"the page logged errors: {self.errors}"


@pytest.fixture
def visit(browser: Any, base_url: str, screenshots: Path) -> Iterator[Visit]:
    v = Visit(browser, base_url, screenshots)
    yield v
    v.close()


def test_every_page_renders_offline(visit: Visit, site: Path) -> None:
    """Every page of the site: no error, no request to another host (checked on close)."""
    pages = sorted(str(p.parent.relative_to(site)) for p in site.rglob("index.html"))
    assert len(pages) >= 20, pages
    for rel in pages:
        path = "" if rel == "." else f"{rel}/"
        page = visit.open(path)
        if page.locator("article h1").count() == 0:
            # once, at load ~15, api/backends/ came without its heading: the test's own
            # server's answer cut short (the files are static); a second load must have it
            page = visit.open(path)
        assert page.locator("article h1").count() >= 1, path
        assert page.locator("nav.md-nav--primary").count() == 1, path
        text = page.locator("article").inner_text()
        raw = RAW_ROLE.findall(text)
        assert not raw, f"{path}: raw Sphinx roles on the page: {raw[:5]}"
        assert "\\|" not in text, f"{path}: a literal \\| on the page"
        name = "home" if rel == "." else rel.replace("/", "-")
        visit.page.screenshot(path=str(visit.shots / f"page-{name}.png"))


def _smallest_text_px(svg: Any) -> float:
    """The smallest rendered font size of the SVG's labels, in CSS px (its font size in
    user units times the scale the page draws them at)."""
    smallest: float = svg.evaluate("""svg => Math.min(...[...svg.querySelectorAll("text")]
        .map(t => parseFloat(t.getAttribute("font-size") || getComputedStyle(t).fontSize)
                  * t.getScreenCTM().a))""")
    return smallest


def test_states_page_shows_the_diagram(visit: Visit) -> None:
    page = visit.open("states/")
    figures = page.locator("figure.fsm-diagram")
    assert figures.count() == len(DiagramPart)  # the core first, then each opt-in part
    assert figures.first.get_attribute("class") == "fsm-diagram fsm-core"
    # the core fits the page's width: nothing to scroll (issue 41 item 6: the one
    # drawing of 17 states was several page-widths wide)
    core = figures.first
    assert core.evaluate("f => f.scrollWidth <= f.clientWidth"), core.evaluate(
        "f => [f.scrollWidth, f.clientWidth]")
    text = " ".join(f.locator("svg").text_content() for f in figures.all())
    for state in State:
        assert state.value in text, state
    ids = page.locator("figure.fsm-diagram svg g.edge[id^='edge-']:not(#edge-initial)")
    drawn = [int(i) for el in ids.all() for i in (el.get_attribute("id") or "")[5:].split("+")]
    assert sorted(drawn) == list(range(len(EDGES)))
    assert page.locator("pre code.language-mermaid, .mermaid").count() == 0  # no raw source
    for figure in figures.all()[1:]:
        _no_label_overlaps(figure.locator("svg"))
    svg = core.locator("svg")
    assert svg.bounding_box()["width"] > 300  # drawn, not an empty box
    _no_label_overlaps(svg)
    visit.shot("states")
    # dark mode: the toggle switches the palette, the diagram's text follows the page
    light = svg.locator("text").first.evaluate("t => getComputedStyle(t).fill")
    page.locator("label[for='__palette_1']").click()
    page.wait_for_function("document.body.getAttribute('data-md-color-scheme') === 'slate'")
    dark = svg.locator("text").first.evaluate("t => getComputedStyle(t).fill")
    assert light != dark
    visit.shot("states-dark")


def _no_label_overlaps(svg: Any) -> None:
    # no label lies over another edge's label or over a state's box (as drawn)
    overlaps = svg.evaluate("""svg => {
        const box = el => {
            const b = el.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
        const hit = (a, b) =>
            a[0] < b[2] - 1 && b[0] < a[2] - 1 && a[1] < b[3] - 1 && b[1] < a[3] - 1;
        const labels = [...svg.querySelectorAll("g.edge")].flatMap(g =>
            [...g.querySelectorAll("text")].map(t => [g.id, t.textContent, box(t)]));
        const nodes = [...svg.querySelectorAll("g.node")].map(g =>
            [g.id, box(g.querySelector("path, polygon, ellipse"))]);
        const out = [];
        for (const [i, [ga, ta, a]] of labels.entries()) {
            for (const [gb, tb, b] of labels.slice(i + 1))
                if (ga !== gb && hit(a, b)) out.push(`${ga} "${ta}" / ${gb} "${tb}"`);
            for (const [n, b] of nodes) if (hit(a, b)) out.push(`${ga} "${ta}" / box ${n}`);
        }
        return out;
    }""")
    assert overlaps == [], overlaps
    # and no arrow runs through another edge's label (sampled every 2 px along each path;
    # the self-loop labels beside Validating used to sit on six arrows)
    crossings = svg.evaluate("""svg => {
        const box = el => {
            const b = el.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
        const inside = (p, b) =>
            p.x > b[0] + 1 && p.x < b[2] - 1 && p.y > b[1] + 1 && p.y < b[3] - 1;
        const labels = [...svg.querySelectorAll("g.edge")].flatMap(g =>
            [...g.querySelectorAll("text")].map(t => [g.id, t.textContent, box(t)]));
        const out = new Set();
        for (const g of svg.querySelectorAll("g.edge"))
            for (const path of g.querySelectorAll("path"))
                for (let d = 0; d <= path.getTotalLength(); d += 2) {
                    const p = path.getPointAtLength(d);
                    for (const [id, t, b] of labels)
                        if (id !== g.id && inside(p, b)) out.add(`${g.id} crosses ${id} "${t}"`);
                }
        return [...out];
    }""")
    assert crossings == [], crossings
    # every label is readable as drawn: at least 11 CSS px (shrunk to the column it was 5-9)
    assert _smallest_text_px(svg) >= 11


@pytest.mark.parametrize(("path", "names"), [
    ("api/spec/", ["JobSpec", "SlurmParams", "Mount", "Duration"]),
    ("api/running/", ["Executor", "Events", "StderrEvents", "make_plan"]),
    ("api/allocation/", ["Allocation", "AllocationStatus", "StateStore", "AllocState"]),
    ("api/machine/", ["AllocationMachine", "State", "EDGES"]),
    ("api/backends/", ["SlurmBackend", "SubprocessBackend"]),
    ("api/report/", ["Report", "Status"]),
    ("api/testing/", ["FakeCluster", "FakeScript", "FakeClock"]),
    ("api/errors/", ["SlurmFsmError", "SpecError", "AllocationFailed"]),
])
def test_api_pages_list_the_main_names(visit: Visit, path: str, names: list[str]) -> None:
    page = visit.open(path)
    ids = page.locator("h2.doc-heading").evaluate_all("hs => hs.map(h => h.id)")
    found = {i.rsplit(".", 1)[-1] for i in ids}
    for name in names:
        assert name in found, (name, ids)
        assert page.locator(f"h2.doc-heading[id$='.{name}'] code, h2.doc-heading[id$='.{name}']",
                            has_text=name).first.is_visible()
    # a docstring made it to the page, not just the names
    assert page.locator(".doc-contents p").count() > 0
    visit.shot(path.strip("/").replace("/", "-"))


def test_api_index_links_every_group(visit: Visit) -> None:
    page = visit.open("api/")
    for group in ("Spec", "Running a job", "The allocation", "The machine", "Backends",
                  "The report", "Testing with the fake cluster", "Errors"):
        link = page.locator("article table a", has_text=group)
        assert link.count() == 1, group
        assert page.locator("nav.md-nav a", has_text=group).count() >= 1, group
    visit.shot("api-index")


def test_notebook_page_shows_its_outputs(visit: Visit) -> None:
    page = visit.open("notebooks/stepping/")
    outputs = page.locator(".jp-OutputArea-output")
    assert outputs.count() >= 8
    text = " ".join(outputs.all_text_contents())
    assert "stateDiagram-v2" not in text  # the diagram is a picture, not mermaid text
    pictures = page.locator(".jp-OutputArea-output svg, .jp-OutputArea-output img")
    assert pictures.count() >= 1
    assert pictures.first.bounding_box()["width"] > 300
    diagrams = page.locator(".jp-OutputArea-output svg:has(text)")
    for i in range(diagrams.count()):  # readable as drawn, as on the states page
        assert _smallest_text_px(diagrams.nth(i)) >= 11
    assert "Unable to contact slurm controller" in text
    assert "State.Ready" in text
    assert "Traceback" not in text
    # no code or output line is clipped at its cell's edge
    clipped = page.locator("article pre").evaluate_all(
        "ps => ps.filter(p => p.scrollWidth > p.clientWidth + 1)"
        ".map(p => p.textContent.slice(0, 60))")
    assert clipped == [], clipped
    visit.shot("notebook")


def test_benchmark_page_shows_charts_of_the_results(visit: Visit) -> None:
    figs = json.loads(RESULTS.read_text())["figures"]
    rows = {r["key"]: r for f in figs.values() for r in f.get("rows", ())}
    page = visit.open("benchmarks/")
    # the first chart is near the top, not under the method (it was 3,400 px down)
    assert page.locator("article img").first.bounding_box()["y"] < 900
    for line in page.locator("article li", has_text="not met").all_inner_texts():
        if line.startswith("Target"):
            assert "Why: What the figures say" in line, line
    imgs = page.locator("article img.bench-chart")
    assert imgs.count() == 3
    for i in range(imgs.count()):
        img = imgs.nth(i)
        img.scroll_into_view_if_needed()
        assert img.evaluate("i => i.complete && i.naturalWidth > 0"), img.get_attribute("src")
        assert img.get_attribute("alt")
    # each chart shows this results file's numbers (drawn at build time, not a stale copy)
    svgs = {src: page.evaluate("u => fetch(u).then(r => r.text())", src)
            for src in (imgs.nth(i).evaluate("i => i.src") for i in range(imgs.count()))}
    per_job = next(s for u, s in svgs.items() if u.endswith("per-job.svg"))
    for key in ("persistent_per_job_s", "one_shot_per_job_s", "submitit_per_job_s"):
        assert f"{rows[key]['median']:.3f} s" in per_job, key
    warm = next(s for u, s in svgs.items() if u.endswith("warm-overhead.svg"))
    assert f"{rows['c_bare_bash_ms']['median']:.1f} ms" in warm
    assert "step 0 (squeue)" in warm
    monitor = next(s for u, s in svgs.items() if u.endswith("monitor-cost.svg"))
    assert "1 GiB" in monitor and "CPU s per GiB" in monitor
    # the stream across real expiries (benchmarks/stream.py): present, loads, its numbers
    stream = page.locator("article img[src$='stream.svg']")
    assert stream.count() == 1
    stream.scroll_into_view_if_needed()
    assert stream.evaluate("i => i.complete && i.naturalWidth > 0")
    assert "hand-off" in (stream.get_attribute("alt") or "")
    drawn = page.evaluate("u => fetch(u).then(r => r.text())", stream.evaluate("i => i.src"))
    for run in json.loads((REPO / "benchmarks" / "stream.json").read_text())["results"]:
        passed = sum(1 for j in run["jobs"] if j["status"] == "PASSED")
        assert f"{passed}/{len(run['jobs'])} PASSED" in drawn, run["mode"]
        assert f'id="stream-{run["mode"]}-jobs"' in drawn
    visit.shot("benchmarks")


def test_theme_search_and_code_copy(visit: Visit) -> None:
    page = visit.open("")
    nav = page.locator("nav.md-nav--primary").text_content()
    for title in ("Concepts", "Job spec", "Stepping the allocation machine", "API reference",
                  "Benchmarks"):
        assert title in nav, title
    copy = "button.md-code__button[data-md-type='copy'], button.md-clipboard"
    assert page.locator(copy).count() > 0  # copy buttons on code blocks
    page.locator("input.md-search__input").click()
    page.locator("input.md-search__input").press_sequentially("FakeCluster", delay=20)
    results = page.locator(".md-search-result__item")
    results.first.wait_for(timeout=15_000)  # the search index, served by the site itself
    assert results.count() > 0
    assert "FakeCluster" in results.first.text_content()
    visit.shot("search")
