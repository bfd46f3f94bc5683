"""Project files stay consistent: one dependency list mirrored for conda, torch pinned, nbval configured."""

import tomllib

import yaml

from albert_edu.tools.manifest import ROOT


def pyproject():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_environment_yml_lists_the_same_packages_as_pyproject():
    project = pyproject()["project"]
    expected = set(project["dependencies"]) | {r for extra in project["optional-dependencies"].values() for r in extra}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert set(pip) - {"-e ."} == expected
    assert "python=3.11" in env["dependencies"]


def test_torch_is_pinned_to_the_local_cpu_build():
    assert "torch==2.13.0" in pyproject()["project"]["dependencies"]


def test_installed_torch_is_the_pinned_release():
    import torch

    assert torch.__version__.split("+")[0] == "2.13.0"


def test_nbval_is_configured_with_the_committed_sanitize_file():
    options = pyproject()["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert {"--nbval", "--nbval-current-env"} <= set(options)
    sanitize = options[options.index("--nbval-sanitize-with") + 1]
    assert (ROOT / sanitize).is_file()
