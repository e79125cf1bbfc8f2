"""The deployment's settings: declared once, and every reader of them reads the declarations."""

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from skslot_bench import BenchmarkConfig

import skslot.flower.config as config_module
from skslot.defaults import CLIENT_TAU as DEFAULT_CLIENT_TAU
from skslot.defaults import LABEL_MIX, default_tau
from skslot.defaults import MEAN_TAU as DEFAULT_MEAN_TAU
from skslot.defaults import TAU as DEFAULT_TAU
from skslot.defence import DefenceBounds
from skslot.flower import AlignmentSettings, DeploymentConfig, Setting
from skslot.heads import make_head
from skslot.privacy import PrivacyBudget
from skslot.protocol import OneShotProtocol
from skslot.selection import DEFAULT_TAUS
from skslot.transformer import SLOTTransformer

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = DeploymentConfig.settings()
NAMES = [s.name for s in SETTINGS]

#: A valid value other than the default, for every setting.
OTHER = {
    "accept_partial": True,
    "head": "FedPFT",
    "head_params": '{"rank": 2}',
    "label_mix": "federation",
    "classes": "cat,dog,eel",
    "seed": 3,
    "summary_dtype": "float64",
    "server_jobs": -1,
    "client_batch": 4,
    "tau": "auto",
    "mean_tau": None,
    "client_tau": "uniform",
    "summary_covariance": "within",
    "summary_form": "dense",
    "taus": "0,0.5,1",
    "head_grid": '{"shrinkage": [0.01, 0.1]}',
    "validation_fraction": 0.25,
    "selection_rule": "best",
    "defence": False,
    "max_dimension": 512,
    "n_features": 256,
    "max_count_ratio": 50.0,
    "max_weight_ratio": 5.0,
    "max_norm_ratio": 3.0,
    "clip_norm_ratio": 2.0,
    "max_variance_ratio": 20.0,
    "max_mean_offset": 4.0,
    "screen": "off",
    "screen_significance": 0.05,
    "screen_min_gain": 0.05,
    "alpha": None,
    "dataset": "office-caltech10",
    "clients_per_domain": 2,
    "test_size": 0.25,
    "epsilon": 2.0,
    "delta": 1e-6,
    "clip_norm": 5.0,
    "num_clients": 4,
    "min_clients": 3,
    "connect_timeout": 5.0,
    "reply_timeout": 30.0,
    "progress_interval": 0.0,
    "retry_interval": 2.0,
    "output_dir": 'C:\\out "x"',
}
#: Settings some values need beside them.
CONTEXT = {"head_params": {"head": "FedPFT"}}
#: A value each string setting with its own format refuses, and the message it gives.
BAD_STRINGS = {
    "head": ("SVM", "unknown head 'SVM'"),
    "head_params": ("[1]", "head_params must be a JSON object"),
    "classes": ("1", "classes must list at least 2 distinct labels"),
    "taus": ("0,0.4,0.4", "taus repeats"),
    "head_grid": ('{"shrinkage": 0.1}', "head_grid['shrinkage'] must be a JSON list"),
}


def test_every_setting_has_a_test_value_and_one_name():
    assert sorted(OTHER) == sorted(NAMES)
    assert len(set(NAMES)) == len(NAMES)
    assert [s.key for s in SETTINGS] == [name.replace("_", "-") for name in NAMES]
    for s in SETTINGS:
        assert DeploymentConfig.setting(s.key) is DeploymentConfig.setting(s.name) is s


@pytest.mark.parametrize("name", NAMES)
def test_each_setting_round_trips_through_the_run_config_and_the_command_line(name):
    s = DeploymentConfig.setting(name)
    config = DeploymentConfig(**CONTEXT.get(name, {}), **{name: OTHER[name]})
    assert getattr(config, name) == OTHER[name] != s.default
    run_config = config.to_run_config()
    assert list(run_config) == [s.key for s in SETTINGS]
    value = run_config[s.key]
    assert type(value) in (bool, int, float, str)  # what a Flower run config holds
    assert DeploymentConfig.from_run_config(run_config) == config
    text = str(value).lower() if isinstance(value, bool) else str(value)
    assert s.check(s.from_text(text)) == getattr(config, name)


def test_a_run_config_value_is_the_one_python_value():
    """``"none"`` is ``None`` and an integer a float, from a run config and from keywords."""
    config = DeploymentConfig(alpha="none", mean_tau="None", tau=1, max_count_ratio=20)
    assert config.alpha is None and config.mean_tau is None
    assert type(config.tau) is float and type(config.max_count_ratio) is float
    assert config == DeploymentConfig.from_run_config(
        {"alpha": "none", "mean-tau": "none", "tau": 1.0, "max-count-ratio": 20}
    )


def _bad_values(s: Setting) -> list:
    """Values of the wrong type, outside the bounds, or not among the options."""
    wrong_type = {bool: "yes", int: 2.5, float: "lots", str: 3}[s.kind]
    values = [wrong_type]
    if s.low is not None:
        values.append(s.low if s.low_open else s.low - 1)
    if s.high is not None:
        values.append(s.high if s.high_open else s.high + 1)
    if s.nonzero:
        values.append(0)
    if s.options:
        values.append("nope")
    return values


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_value_names_the_key_what_it_allows_and_the_value(name):
    s = DeploymentConfig.setting(name)
    for value in _bad_values(s):
        for build, settings in (
            (DeploymentConfig.from_run_config, {s.key: value}),
            (lambda settings: DeploymentConfig(**settings), {name: value}),
        ):
            with pytest.raises(ValueError) as info:
                build(settings)
            message = str(info.value)
            assert f"(run-config key '{s.key}')" in message
            assert message.startswith(f"{name} must be ") and f"got {value!r}" in message


@pytest.mark.parametrize("name", sorted(BAD_STRINGS))
def test_a_string_in_a_bad_format_names_the_key(name):
    s = DeploymentConfig.setting(name)
    value, message = BAD_STRINGS[name]
    context = {"tau": "auto"} if name == "taus" else {}
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        DeploymentConfig.from_run_config({**context, s.key: value})
    assert str(info.value).endswith(f"(run-config key '{s.key}')")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"n_features": 5000}, "n_features must be at most max_dimension (4096)"),
        ({"screen": "on", "defence": False}, "screen='on' needs a defence"),
        ({"head": "FedPFT", "head_params": '{"ranks": 2}'}, "head-params"),
        ({"tau": "auto", "head": "FedPFT", "head_grid": '{"shrinkage": [1]}'}, "head-grid"),
        (
            {
                "epsilon": 1.0,
                "head": "FedPFT",
                "head_params": '{"n_components": 2, "covariance_type": "full"}',
            },
            "a private release fits one Gaussian per class",
        ),
        ({"epsilon": 1.0, "tau": "auto"}, "a private run needs a fixed tau"),
        ({"epsilon": 1.0, "screen": "on"}, "a private run does not screen"),
        (
            {"epsilon": 1.0, "head": "O-FedAvg", "summary_covariance": "within"},
            "summary of the total covariance",
        ),
    ],
)
def test_settings_that_do_not_go_together_are_refused(settings, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        DeploymentConfig(**settings)


def test_an_unknown_name_is_a_type_error_with_a_suggestion():
    with pytest.raises(TypeError, match="no setting 'rule'; did you mean 'selection_rule'"):
        DeploymentConfig(rule="best")
    with pytest.raises(TypeError, match="alignment_settings must be AlignmentSettings, got dict"):
        DeploymentConfig(alignment_settings={"tau": 0.4})


def test_each_setting_is_checked_once_and_the_rules_between_them_by_the_protocol(monkeypatch):
    calls, built = [], []
    check, driver = Setting.check, config_module.OneShotProtocol

    def counted(self, value):
        calls.append(self.name)
        return check(self, value)

    def counted_driver(*args, **kwargs):
        built.append(kwargs["tau"])
        return driver(*args, **kwargs)

    monkeypatch.setattr(Setting, "check", counted)
    monkeypatch.setattr(config_module, "OneShotProtocol", counted_driver)
    config = DeploymentConfig(tau="auto", selection_rule="best")
    assert sorted(calls) == sorted(NAMES)  # each setting checked once
    assert built == ["auto"]  # the rules between settings: the protocol's own, run once
    calls.clear()
    changed = dataclasses.replace(config, min_clients=5)
    assert calls == [s.name for s in config.run_settings.settings()]  # only the part changed
    assert changed.min_clients == 5 and changed.alignment_settings is config.alignment_settings
    with pytest.raises(ValueError, match="head-grid"):  # the protocol's rule, named by its keys
        DeploymentConfig(tau="auto", head="FedPFT", head_grid='{"shrinkage": [1]}')


@pytest.mark.parametrize("name", NAMES)
def test_the_driver_takes_every_configuration_the_checks_accept(name):
    config = DeploymentConfig(**CONTEXT.get(name, {}), **{name: OTHER[name]})
    protocol = config.protocol()
    assert protocol.selection_rule == config.selection_rule
    assert protocol.config == config.to_run_config()
    assert (protocol.defence is None) == (not config.defence)


def test_the_parts_hold_the_settings_and_the_config_reads_them_flat():
    config = DeploymentConfig(tau=0.4, alpha=None, min_clients=3)
    assert config.alignment_settings == AlignmentSettings(tau=0.4)
    assert config.data_settings.alpha is None and config.run_settings.min_clients == 3
    for part, cls in DeploymentConfig.parts().items():
        assert isinstance(getattr(config, part), cls)
        for s in cls.settings():
            assert getattr(config, s.name) == getattr(getattr(config, part), s.name)
    built = DeploymentConfig(alignment_settings=AlignmentSettings(tau=0.4), alpha=None)
    assert built == DeploymentConfig(tau=0.4, alpha=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.alignment_settings.tau = 0.2


def test_defaults_that_belong_to_another_object_are_read_from_it():
    config = DeploymentConfig()
    for f in dataclasses.fields(DefenceBounds):
        assert DeploymentConfig.setting(f.name).default == f.default == getattr(config, f.name)
    assert config.defence_bounds() == DefenceBounds()
    assert (config.mean_tau, config.client_tau, config.label_mix) == (
        DEFAULT_MEAN_TAU,
        DEFAULT_CLIENT_TAU,
        LABEL_MIX,
    )
    assert config.tau == "default" and config.protocol().tau == default_tau(LABEL_MIX)
    federation = DeploymentConfig(label_mix="federation")
    assert federation.protocol().tau == DEFAULT_TAU
    assert federation.protocol().head.label_mix == "federation"
    assert config.tau_grid == DEFAULT_TAUS


def test_the_documentation_is_written_from_the_declarations(monkeypatch):
    """The run-config reference (docs/run_config.md) is a table the docs build writes from
    the declarations, one row per setting; each part's docstring lists its settings."""
    monkeypatch.syspath_prepend(str(ROOT / "docs" / "_ext"))
    from skslot_reference import run_config_rows

    assert "```{skslot-run-config}" in (ROOT / "docs" / "run_config.md").read_text()
    rows = {row[0]: row for row in run_config_rows()}
    for part in DeploymentConfig.parts().values():
        for s in part.settings():
            assert rows[s.key] == [s.key, s.allowed, s.shown_default, s.help], s.key
            entry = f"{s.name} : {s.doc_type}, default="
            assert entry in part.__doc__
            assert " ".join(s.help.split()) in " ".join(part.__doc__.split())
            assert " ".join(s.details.split()) in " ".join(part.__doc__.split())


def test_class_names_are_sent_as_positions_and_labels_are_checked():
    config = DeploymentConfig(classes="cat,dog,eel")
    np.testing.assert_array_equal(config.class_set, [0, 1, 2])
    np.testing.assert_array_equal(config.label_codes(["eel", "cat"]), [2, 0])
    with pytest.raises(ValueError, match=r"labels \['fox'\] of the node's data"):
        config.label_codes(["fox"])


# -- one name per setting: the former names still work, with a warning ------------------


#: Parameters that share a name with an entry of the table of defaults but not its meaning
#: or its value, each with why.
_NOT_THE_TABLE_S = {
    # the tables of docs/results are measured on dense summaries (factor summaries give
    # the same accuracies: tests/test_bench.py), so the benchmark's default is dense
    ("BenchmarkConfig", "form"),
    # a summariser merges (partial_fit, merge) in the dense form only; the aligners and the
    # protocol's clients resolve the table's "auto" themselves
    ("GaussianSummaryEstimator", "form"),
    # how a Flower setting is shown in the docs, not a summary's form
    ("Setting", "form"),
    ("declare", "form"),
}


def test_every_default_of_the_library_is_read_from_one_table():
    """Each parameter named after an entry of :mod:`skslot.defaults` defaults to its value."""
    import importlib
    import inspect
    import pkgutil

    import skslot
    from skslot import defaults

    table = {
        "mean_tau": defaults.MEAN_TAU,
        "client_tau": defaults.CLIENT_TAU,
        "label_mix": defaults.LABEL_MIX,
        "covariance_floor": defaults.COVARIANCE_FLOOR,
        "validation_fraction": defaults.VALIDATION_FRACTION,
        "delta": defaults.DELTA,
        "taus": defaults.TAUS,
        "form": defaults.FORM,
    }
    found, differ = 0, []
    for info in pkgutil.walk_packages(skslot.__path__, "skslot."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj):
                functions = [
                    obj.__init__,
                    *(f for f in vars(obj).values() if inspect.isfunction(f)),
                ]
            elif inspect.isfunction(obj):
                functions = [obj]
            else:
                continue
            for function in functions:
                owner = function.__qualname__.split(".")[0]
                for p in inspect.signature(function).parameters.values():
                    if p.name not in table or p.default in (inspect.Parameter.empty, None):
                        continue
                    if (owner, p.name) in _NOT_THE_TABLE_S:
                        continue
                    found += 1
                    want = table[p.name]
                    if p.name == "taus" and isinstance(p.default, str):  # a run config's text
                        got = tuple(float(t) for t in p.default.split(","))
                    elif p.name == "delta" and owner == "LifetimeBudget":
                        got, want = p.default, defaults.LIFETIME_DELTA
                    else:
                        got = p.default
                    if got != want:
                        differ.append((module.__name__, function.__qualname__, p.name, got))
    assert found > 20 and differ == []
    protocol, slot = OneShotProtocol(make_head("FedCGS")), SLOTTransformer()
    config = DeploymentConfig()
    for name in ("mean_tau", "client_tau", "validation_fraction", "covariance_floor"):
        values = {getattr(protocol, name), getattr(config, name, getattr(protocol, name))}
        if hasattr(slot, name):
            values.add(getattr(slot, name))
        assert values == {table[name]}, name
    assert slot.barycenter_estimator().covariance_floor == defaults.COVARIANCE_FLOOR
    assert BenchmarkConfig().validation_fraction == defaults.VALIDATION_FRACTION


#: Run-config settings named like a protocol parameter but not read from it, each with why.
_TEXT_FORMS = {
    "head": "a registered head's name for the protocol's head object",
    "defence": "true or false for the protocol's DefenceBounds (its bounds: settings of theirs)",
    "tau": "the run config's words 'default' and 'auto' (the protocol's None and 'auto')",
    "taus": "comma-separated text for the protocol's sequence",
    "head_grid": "a JSON object for the protocol's mapping",
}


def test_each_setting_of_a_library_parameter_is_read_from_its_declaration():
    """A run-config setting that is a parameter of the protocol (or of the defence's bounds, or
    the summary estimator) takes its options, bounds and default from there, and so does the
    bench's option."""
    import importlib
    import inspect

    from skslot._param_validation import Interval, Options
    from skslot.cli import build_parser

    protocol = set(inspect.signature(OneShotProtocol).parameters)
    owned = {}
    for s in DeploymentConfig.settings():
        if s.name in protocol and s.name not in _TEXT_FORMS:
            assert s.owner == f"skslot.protocol.OneShotProtocol.{s.name}", s.name
        if not s.owner:
            continue
        path, _, parameter = s.owner.rpartition(".")
        module, _, name = path.rpartition(".")
        owner = getattr(importlib.import_module(module), name)
        constraints = owner._parameter_constraints[parameter]
        options = [  # a run config's options are words (a number's are its bounds')
            c.options
            for c in constraints
            if isinstance(c, Options) and all(isinstance(o, str) for o in c.options)
        ]
        assert s.options == (tuple(options[0]) if options else ()), s.name
        for interval in (c for c in constraints if isinstance(c, Interval)):
            assert (s.low, s.high) == (interval.left, interval.right), s.name
            if interval.right is not None:  # beyond the bound: refused by both
                beyond = interval.right + 1
                with pytest.raises(ValueError, match=s.name):
                    s.check(beyond)
                with pytest.raises(ValueError, match=parameter):
                    if owner is OneShotProtocol:
                        OneShotProtocol(make_head("FedCGS"), **{parameter: beyond})
                    elif owner is PrivacyBudget:
                        PrivacyBudget(**{"epsilon": 1.0, parameter: beyond})
                    else:
                        owner(**{parameter: beyond})
        # its help (the first sentence, as plain text) and details: the owner's numpydoc
        pointer = f"See :class:`~{path}`'s ``{parameter}``."
        entry = " ".join(inspect.getdoc(owner).split())
        entry = entry[entry.index(f" {parameter} : ") :][:2000]
        assert " ".join(s.help.split()[:4]) in entry[:200], s.name
        assert s.details.endswith(pointer) and s.details.removesuffix(pointer).strip() in entry
        default = inspect.signature(owner).parameters[parameter].default
        # a deployment's own defaults: 2 clients, the summaries' form, no privacy
        assert s.default == default or s.name in ("min_clients", "summary_form", "epsilon")
        owned[s.name] = s
    assert len(owned) == 19
    # the bench's options of the same settings are made from these declarations
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    bench = subparsers.choices["bench"]
    generated = {a.dest: a for a in bench._actions if a.dest in BENCH_SETTINGS}
    assert set(generated) == set(BENCH_SETTINGS)
    for dest, name in BENCH_SETTINGS.items():
        action, s = generated[dest], DeploymentConfig.setting(name)
        assert action.help.startswith(s.help) and action.metavar == s.metavar, dest
        assert action.default == getattr(BenchmarkConfig, dest)
        with pytest.raises(ValueError, match=s.name):  # its check, the setting's
            s.check("far" if s.options else 7.5)


#: The bench's options that are run-config settings: option's field to the setting.
BENCH_SETTINGS = {
    "summary_covariance": "summary_covariance",
    "client_tau": "client_tau",
    "mean_tau": "mean_tau",
    "form": "summary_form",
    "validation_fraction": "validation_fraction",
    "clients_per_domain": "clients_per_domain",
}


def test_the_run_config_is_declared_without_docstrings():
    """Under ``python -OO`` (docstrings stripped) an owned setting's help is its name."""
    code = (
        "from skslot.flower import AlignmentSettings, DeploymentConfig; "
        "print(DeploymentConfig().mean_tau, AlignmentSettings().setting('mean_tau').help)"
    )
    out = subprocess.run(
        [sys.executable, "-OO", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["1.0", "mean", "tau"]


def test_a_deployment_s_own_setting_reads_its_help_from_its_part_s_numpydoc():
    """``declare`` without help: the part's Parameters entry gives the help (its first
    sentence, as plain text) and the details (the rest); a part that does not describe a
    setting is a TypeError at import."""
    from dataclasses import dataclass

    from skslot.flower.settings import SettingsGroup, declare, declared

    @declared
    @dataclass(frozen=True)
    class Part(SettingsGroup):
        """A part.

        Parameters
        ----------
        rounds
            How many rounds ``none`` of the
            clients wait. More in :class:`~skslot.BuresBarycenter`.
        """

        rounds: int = declare(3, low=1)

    rounds = Part.setting("rounds")
    assert rounds.help == "How many rounds none of the clients wait"
    assert rounds.details == "More in :class:`~skslot.BuresBarycenter`."
    assert "rounds : int, default=3" in Part.__doc__ and Part.__doc__.count("Parameters") == 1
    with pytest.raises(TypeError, match="does not describe 'rounds'"):

        @declared
        @dataclass(frozen=True)
        class Undocumented(SettingsGroup):
            """A part without a Parameters section."""

            rounds: int = declare(3, low=1)
