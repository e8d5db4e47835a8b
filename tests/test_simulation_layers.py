"""The simulations' layers hold: no import cycle in simulations/, and each module imports
only its own layer and those below it (docs/simulation.md, "Layers")."""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import cycle_in, import_graph, module_files

SIMULATIONS = Path(__file__).resolve().parent.parent / "simulations"
# Bottom to top. The web is what the workers fetch; the checks judge the web's log and
# nothing else; the crew are real drivers seen through faulty links, which read their
# world through the few names they are handed; the world builds the crew and steps it;
# the scenarios act on a world; the verdicts judge one; the models draw the steps.
LAYERS = (
    (
        "ground",
        {"simulations", "loop", "observe", "planted", "figures", "lua_mutants", "mutant_cache"},
    ),
    ("web", {"changes", "web"}),
    ("checks", {"checks", "revisits"}),
    ("crew", {"crew", "shardcrew", "fleet"}),
    ("world", {"world"}),
    ("scenarios", {"reach", "names"}),
    ("verdicts", {"verdict", "shardverdict"}),
    ("models", {"model", "profiles", "known", "teeth", "shards", "mutants", "__main__"}),
)
LEVEL = {module: level for level, (_, modules) in enumerate(LAYERS) for module in modules}


def short(module: str) -> str:
    return module.rpartition(".")[2]


def test_the_simulations_have_no_import_cycle() -> None:
    """No module of simulations/ imports itself back, through any chain of imports."""
    found = cycle_in(import_graph(SIMULATIONS))
    assert found is None, " -> ".join(found or [])


def test_each_simulation_layer_imports_only_itself_and_the_layers_below() -> None:
    """The web imports no world, the crew no world, the world no scenario or verdict."""
    upward = [
        f"{short(module)} ({LAYERS[LEVEL[short(module)]][0]}) -> "
        f"{short(target)} ({LAYERS[LEVEL[short(target)]][0]})"
        for module, targets in import_graph(SIMULATIONS).items()
        for target in targets
        if LEVEL[short(target)] > LEVEL[short(module)]
    ]
    assert upward == []


def test_every_simulation_module_has_a_layer() -> None:
    """A new module of simulations/ gets its place here."""
    assert {short(m) for m in module_files(SIMULATIONS)} == set(LEVEL)


def test_the_graph_sees_a_type_only_import() -> None:
    """The checks above could fail: the graph holds the revisits judges' import of the
    web, which sits under ``if TYPE_CHECKING``."""
    assert "simulations.web" in import_graph(SIMULATIONS)["simulations.revisits"]
