"""docker-compose.yaml runs what the `cluster` and `scheduler` tiers run for real.

No Docker engine runs here, so the compose file can never be started by the tests. Instead
each check below holds one part of it to the code the real tiers run:

- the Spark master and worker: :mod:`tests.support.spark_cluster`'s argv and environment;
- the Airflow components: :mod:`tests.support.airflow_services`'s commands and settings;
- the one image: the Python minor version, pyspark and Airflow versions of this
  interpreter, Java 17;
- the DAGs mount, the volume the Airflow worker and the Spark worker share, the Spark
  connection (resolved by the Spark provider's own hook), and the submit-mode example DAG;
- Airflow installed with the constraints file of its version and the image's Python, and no
  later step that could move it (issue 18, item 20);
- airflow-init's secrets check, run here for real with the environment compose gives it:
  the file's default secrets stop the stack unless ``EOD_LOCAL_TRIAL=1`` (issue 18, item 20).

Loopback in the tests is a service name in compose; those differences are the constants
below, and nothing else may differ. ``test_each_check_fails_on_a_broken_compose_file``
breaks the file in memory once per check, so no check passes vacuously.
"""

from __future__ import annotations

import copy
import json
import os
import re
import string
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.support import spark_cluster
from tests.support.helpers import load_dag_file

COMPOSE_FILE = os.path.join(REPO, "docker-compose.yaml")
EXAMPLE_DAG = os.path.join(REPO, "dags", "eod_submit_example.py")

# Compose's values where the tests use loopback and free ports.
SPARK_MASTER = "spark-master"
SPARK_MASTER_PORT = 7077
SPARK_MASTER_WEBUI_PORT = 8080
SPARK_WORKER = "spark-worker"
SPARK_WORKER_WEBUI_PORT = 8081
SPARK_WORK_DIR = "/opt/spark/work"
API_SERVICE = "airflow-apiserver"
API_BIND = "0.0.0.0"  # the tests bind 127.0.0.1; other containers must reach it
API_PORT = "8080"
POSTGRES_SERVICE = "postgres"
# tests.support.airflow_services' service name -> compose service.
AIRFLOW_SERVICES = {
    "api-server": API_SERVICE,
    "scheduler": "airflow-scheduler",
    "dag-processor": "airflow-dag-processor",
    "triggerer": "airflow-triggerer",
}
INIT_SERVICE = "airflow-init"
# Where tasks run (LocalExecutor), hence spark-submit and the client-mode driver.
AIRFLOW_WORKER = "airflow-scheduler"
# The scheduler tier runs no triggerer (nothing there defers): compose's runs like the
# scheduler, reading logs from the shared volume instead of serving them.
UNTESTED_COMMANDS = {"triggerer": ["triggerer", "--skip-serve-logs"]}
JAVA_MAJOR = "17"
PACKAGE_MOUNT = "/opt/airflow-eod"

_INTERPOLATION = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::?-(?P<default>[^}]*))?\}")


def interpolate(value: Any, env: Mapping[str, str] | None = None) -> Any:
    """What compose makes of a value: ``$$`` is a literal ``$``, ``${VAR:-default}`` the value
    of ``VAR`` in ``env`` when set and not empty, else the default (never this machine's
    environment, so the checks are reproducible)."""
    if not isinstance(value, str):
        return value
    given = env or {}

    def fill(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return given.get(m.group("name")) or m.group("default") or ""

    return _INTERPOLATION.sub(fill, value)


def load_compose(path: str = COMPOSE_FILE) -> dict[str, Any]:
    with open(path) as fh:
        data: dict[str, Any] = yaml.safe_load(fh)  # SafeLoader resolves `<<` merge keys
    return data


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    services: dict[str, Any] = compose["services"]
    assert name in services, f"docker-compose.yaml has no service {name!r}"
    svc: dict[str, Any] = services[name]
    return svc


def command(compose: dict[str, Any], name: str) -> list[str]:
    cmd = service(compose, name).get("command")
    assert isinstance(cmd, list), f"{name}: command must be an argv list, not {cmd!r}"
    return [str(interpolate(a)) for a in cmd]


def environment(compose: dict[str, Any], name: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """A service's environment as compose renders it, with ``given`` as the host's variables."""
    env = service(compose, name).get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(interpolate(v, given)) for k, v in env.items()}


def mounts(compose: dict[str, Any], name: str) -> dict[str, str]:
    """target -> source of a service's volumes (short syntax)."""
    found = {}
    for item in service(compose, name).get("volumes") or []:
        source, target, *_ = str(item).split(":")
        found[target] = source
    return found


# -- the checks; each raises AssertionError ----------------------------------------------


def check_spark_master(compose: dict[str, Any]) -> None:
    assert command(compose, SPARK_MASTER) == spark_cluster.master_argv(
        SPARK_MASTER_PORT, SPARK_MASTER_WEBUI_PORT, host=SPARK_MASTER
    )
    env = environment(compose, SPARK_MASTER)
    for key, value in spark_cluster.render_env(SPARK_MASTER).items():
        assert env.get(key) == value, f"{SPARK_MASTER}: {key} must be {value!r}, not {env.get(key)!r}"


def check_spark_worker(compose: dict[str, Any]) -> None:
    master_url = f"spark://{SPARK_MASTER}:{SPARK_MASTER_PORT}"
    assert command(compose, SPARK_WORKER) == spark_cluster.worker_argv(
        master_url, SPARK_WORKER_WEBUI_PORT, SPARK_WORK_DIR, host=SPARK_WORKER
    )
    env = environment(compose, SPARK_WORKER)
    for key, value in spark_cluster.render_env(SPARK_WORKER).items():
        assert env.get(key) == value, f"{SPARK_WORKER}: {key} must be {value!r}, not {env.get(key)!r}"


def check_airflow_commands(compose: dict[str, Any], services_module: ModuleType) -> None:
    expected: dict[str, list[str]] = {**UNTESTED_COMMANDS, **services_module.AIRFLOW_SERVICE_COMMANDS}
    for name, argv in expected.items():
        rendered = [services_module.render(a, {"api_port": API_PORT}) for a in argv]
        if name == "api-server":
            rendered = [API_BIND if a == services_module.HOST else a for a in rendered]
        assert command(compose, AIRFLOW_SERVICES[name]) == ["airflow", *rendered], name


def _template_regex(template: str) -> tuple[re.Pattern[str], list[str]]:
    parts: list[str] = []
    names: list[str] = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is not None:
            parts.append(f"(?P={field})" if field in names else f"(?P<{field}>.+?)")
            names.append(field)
    return re.compile("".join(parts)), names


def airflow_placeholders(compose: dict[str, Any], services_module: ModuleType) -> dict[str, str]:
    """Every Airflow service's AIRFLOW_SETTINGS, matched against the scheduler tier's templates:
    fixed values equal, and each placeholder one value in every service. Returns the values."""
    values: dict[str, str] = {}
    for name in [*AIRFLOW_SERVICES.values(), INIT_SERVICE]:
        env = environment(compose, name)
        for key, template in services_module.AIRFLOW_SETTINGS.items():
            assert key in env, f"{name}: {key} is not set"
            pattern, _ = _template_regex(template)
            match = pattern.fullmatch(env[key])
            assert match, f"{name}: {key}={env[key]!r} does not have the form {template!r}"
            for placeholder, value in match.groupdict().items():
                seen = values.setdefault(placeholder, value)
                assert seen == value, f"{name}: {placeholder} is {value!r} here and {seen!r} elsewhere"
    return values


def check_airflow_settings(compose: dict[str, Any], services_module: ModuleType) -> None:
    values = airflow_placeholders(compose, services_module)
    db = environment(compose, POSTGRES_SERVICE)
    assert values["db_host"] == POSTGRES_SERVICE and values["db_port"] == "5432"
    assert (values["db_user"], values["db_password"], values["db_name"]) == (
        db["POSTGRES_USER"],
        db["POSTGRES_PASSWORD"],
        db["POSTGRES_DB"],
    )
    assert values["api_host"] == API_SERVICE and values["api_port"] == API_PORT
    # The api-server reads the passwords file that airflow-init writes: one volume.
    folder = os.path.dirname(values["passwords_file"])
    api_volume = mounts(compose, API_SERVICE).get(folder)
    assert api_volume and api_volume == mounts(compose, INIT_SERVICE).get(folder), folder
    assert api_volume in compose.get("volumes", {}), f"{api_volume} is not a named volume"


def _build(compose: dict[str, Any], name: str) -> tuple[str, dict[str, Any]]:
    svc = service(compose, name)
    assert "build" in svc and "image" in svc, f"{name}: must build the one image"
    return svc["image"], svc["build"]


def check_image(compose: dict[str, Any]) -> None:
    import airflow
    import pyspark
    from packaging.specifiers import SpecifierSet

    image, build = _build(compose, AIRFLOW_WORKER)
    for name in [*AIRFLOW_SERVICES.values(), INIT_SERVICE, SPARK_MASTER, SPARK_WORKER]:
        assert _build(compose, name) == (image, build), f"{name} must run the same image as {AIRFLOW_WORKER}"
    args = {k: str(v) for k, v in build["args"].items()}
    assert args["PYTHON_VERSION"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert args["PYSPARK_VERSION"] == pyspark.__version__
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    pin = next(d for d in deps if re.match(r"pyspark\b", d))
    assert args["PYSPARK_VERSION"] in SpecifierSet(pin[len("pyspark") :]), pin
    assert args["AIRFLOW_VERSION"] == airflow.__version__ and args["AIRFLOW_VERSION"].startswith("3.3.")
    assert args["JAVA_VERSION"] == JAVA_MAJOR

    raw = build["dockerfile_inline"]
    # A lone `${` would be filled by compose from the host's environment, not by Docker.
    assert not re.search(r"(?<!\$)\$\{", raw), "escape Dockerfile variables as $${...} in compose"
    dockerfile = interpolate(raw)
    lines = [line.strip() for line in dockerfile.splitlines()]
    for arg in args:
        assert f"ARG {arg}" in lines, f"the Dockerfile does not use the build arg {arg}"
    assert re.search(r"^FROM python:\$\{PYTHON_VERSION\}-slim", dockerfile, re.M), "Python from the arg"
    assert "openjdk-${JAVA_VERSION}-jre-headless" in dockerfile
    for requirement in (
        '"apache-airflow[postgres]==${AIRFLOW_VERSION}"',
        '"pyspark==${PYSPARK_VERSION}"',
        '"pyspark-client==${PYSPARK_VERSION}"',
        f"-e {PACKAGE_MOUNT}",
    ):
        assert requirement in dockerfile, f"the image does not install {requirement}"
    # The editable install runs the checkout mounted over it, wherever airflow_eod runs.
    for name in [*AIRFLOW_SERVICES.values(), INIT_SERVICE, SPARK_WORKER]:
        assert mounts(compose, name).get(PACKAGE_MOUNT) == ".", (
            f"{name}: mount the checkout at {PACKAGE_MOUNT}"
        )


CONSTRAINTS_URL = (
    "https://raw.githubusercontent.com/apache/airflow/constraints-${AIRFLOW_VERSION}/"
    "constraints-${PYTHON_VERSION}.txt"
)
AIRFLOW_PIN = '"apache-airflow[postgres]==${AIRFLOW_VERSION}"'


def dockerfile_runs(compose: dict[str, Any]) -> list[str]:
    """The image's ``RUN`` instructions, continuation lines joined, as Docker sees them."""
    _image, build = _build(compose, AIRFLOW_WORKER)
    text = re.sub(r"\\\n\s*", " ", interpolate(build["dockerfile_inline"]))
    return [line.strip()[4:] for line in text.splitlines() if line.strip().startswith("RUN ")]


def check_constraints(compose: dict[str, Any]) -> None:
    """Airflow goes in with the constraints file of the pinned Airflow and Python; every later
    pip step pins Airflow again, so none can move it off the constrained install."""
    _image, build = _build(compose, AIRFLOW_WORKER)
    args = {k: str(v) for k, v in build["args"].items()}
    pips = [run for run in dockerfile_runs(compose) if run.startswith("pip install")]
    assert pips, "the image installs nothing with pip"
    first = next((i for i, run in enumerate(pips) if "apache-airflow" in run), None)
    assert first is not None, "the image does not install Airflow"
    urls = re.findall(r'--constraint[= ]"?([^"\s]+)"?', pips[first])
    assert urls == [CONSTRAINTS_URL], f"Airflow must be installed with --constraint {CONSTRAINTS_URL}: {urls}"
    rendered = CONSTRAINTS_URL.replace("${AIRFLOW_VERSION}", args["AIRFLOW_VERSION"]).replace(
        "${PYTHON_VERSION}", args["PYTHON_VERSION"]
    )
    tail = f"constraints-{args['AIRFLOW_VERSION']}/constraints-{args['PYTHON_VERSION']}.txt"
    assert rendered.endswith(tail), rendered
    for run in pips[first:]:
        assert AIRFLOW_PIN in run, f"a pip step after the constrained install must pin Airflow: {run}"
    for run in pips[:first]:
        assert "apache-airflow" not in run


INIT_CHECK_OPENER = "python - <<'EOF'"


def secrets_check(compose: dict[str, Any]) -> str:
    """The Python script airflow-init runs first (a heredoc before ``airflow db migrate``)."""
    script = command(compose, INIT_SERVICE)[-1]
    assert script.startswith(INIT_CHECK_OPENER), "airflow-init must start with the secrets check"
    body, sep, rest = script[len(INIT_CHECK_OPENER) :].partition("\nEOF\n")
    assert sep and "airflow db migrate" in rest and "airflow db migrate" not in body, (
        "the secrets check must run, as its own step, before airflow db migrate"
    )
    return body


SECRET_VARIABLES = ("AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET", "POSTGRES_PASSWORD")
CHOSEN_SECRETS = {
    "AIRFLOW_ADMIN_PASSWORD": "pw-4f1c",
    "AIRFLOW_JWT_SECRET": "jwt-93ab",
    "POSTGRES_PASSWORD": "db-77e0",
}


def run_secrets_check(compose: dict[str, Any], given: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """airflow-init's secrets check, run with the environment compose would give airflow-init
    on a host whose variables are ``given``."""
    env = {"PATH": os.environ.get("PATH", ""), **environment(compose, INIT_SERVICE, given)}
    return subprocess.run(
        [sys.executable, "-c", secrets_check(compose)], env=env, capture_output=True, text=True, timeout=60
    )


def check_secrets(compose: dict[str, Any]) -> None:
    # Every Airflow service waits for airflow-init to succeed: its refusal stops the stack.
    for name in AIRFLOW_SERVICES.values():
        needs = service(compose, name).get("depends_on", {}).get(INIT_SERVICE, {})
        waits = needs.get("condition") == "service_completed_successfully"
        assert waits, f"{name} does not wait for {INIT_SERVICE}"
    # The defaults of the file: refused, each named, and the way out said.
    refused = run_secrets_check(compose, {})
    assert refused.returncode != 0, "airflow-init starts with the file's default secrets"
    for name in SECRET_VARIABLES:
        assert name in refused.stderr, refused.stderr
    assert "EOD_LOCAL_TRIAL=1" in refused.stderr, refused.stderr
    # One default left is refused too, by its name.
    for kept in SECRET_VARIABLES:
        partial = run_secrets_check(compose, {k: v for k, v in CHOSEN_SECRETS.items() if k != kept})
        assert partial.returncode != 0 and kept in partial.stderr, (kept, partial.stderr)
        assert not any(k in partial.stderr for k in SECRET_VARIABLES if k != kept), partial.stderr
    # Chosen secrets, or a declared local trial, pass.
    chosen = run_secrets_check(compose, CHOSEN_SECRETS)
    assert chosen.returncode == 0, chosen.stderr
    trial = run_secrets_check(compose, {"EOD_LOCAL_TRIAL": "1"})
    assert trial.returncode == 0, trial.stderr
    assert "local trial" in trial.stdout, trial.stdout


def check_dags_mount(compose: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES.values():
        folder = environment(compose, name)["AIRFLOW__CORE__DAGS_FOLDER"]
        assert mounts(compose, name).get(folder) == "./dags", f"{name}: ./dags is not mounted at {folder}"


def shared_data_volume(compose: dict[str, Any]) -> tuple[str, str]:
    """(target, volume) of the named volume the Airflow worker and the Spark worker share."""
    airflow_side = mounts(compose, AIRFLOW_WORKER)
    spark_side = mounts(compose, SPARK_WORKER)
    shared = [
        (target, source)
        for target, source in spark_side.items()
        if source in compose.get("volumes", {}) and airflow_side.get(target) == source
    ]
    assert len(shared) == 1, f"one named volume at the same path in both workers, found {shared}"
    return shared[0]


def check_shared_data(compose: dict[str, Any]) -> None:
    target, _volume = shared_data_volume(compose)
    env = environment(compose, AIRFLOW_WORKER)
    for key in ("EOD_SUBMIT_LANDING", "EOD_SUBMIT_TABLE"):
        assert env[key].startswith(target.rstrip("/") + "/"), f"{key}={env[key]} is not on {target}"


def check_spark_connection(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    for name in AIRFLOW_SERVICES.values():
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARK_DEFAULT", environment(compose, name)["AIRFLOW_CONN_SPARK_DEFAULT"]
        )
        resolved = SparkSubmitHook(conn_id="spark_default")._connection
        assert resolved["master"] == f"spark://{SPARK_MASTER}:{SPARK_MASTER_PORT}", resolved
        # Spark standalone refuses cluster deploy mode for Python applications.
        assert resolved["deploy_mode"] == "client", resolved
        assert resolved["spark_binary"] == "spark-submit", resolved
    # Where the driver runs, it must advertise an address the executors can reach.
    assert environment(compose, AIRFLOW_WORKER).get("SPARK_LOCAL_IP") == AIRFLOW_WORKER


@dataclass(frozen=True)
class ExampleTask:
    """What compose must agree with in the example DAG's load task."""

    execution: str
    spark_conn_id: str
    spark_conf: dict[str, str]
    landing_path: str
    table_uri: str


def check_example_dag(compose: dict[str, Any], task: ExampleTask) -> None:
    env = environment(compose, AIRFLOW_WORKER)
    assert task.execution == "submit"
    assert f"AIRFLOW_CONN_{task.spark_conn_id.upper()}" in env, f"no connection {task.spark_conn_id!r}"
    assert (task.landing_path, task.table_uri) == (env["EOD_SUBMIT_LANDING"], env["EOD_SUBMIT_TABLE"])
    # The executors' Python is the image's, the one the Airflow side runs too.
    assert task.spark_conf.get("spark.pyspark.python") == env["PYSPARK_PYTHON"] == "/usr/local/bin/python"
    # The example asks for no more than the compose worker offers, or it would wait forever.
    worker = command(compose, SPARK_WORKER)
    cores = int(worker[worker.index("--cores") + 1])
    memory_gb = int(worker[worker.index("--memory") + 1].removesuffix("g"))
    assert int(task.spark_conf.get("spark.cores.max", cores + 1)) <= cores
    assert int(task.spark_conf.get("spark.executor.memory", "1g").removesuffix("g")) <= memory_gb


# -- fixtures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def services_module() -> ModuleType:
    try:
        import tests.support.airflow_services as module
    except ModuleNotFoundError as exc:
        if exc.name != "tests.support.airflow_services":
            raise
        pytest.skip(
            "tests/support/airflow_services.py (the scheduler tier's Airflow commands and settings)"
            " is missing"
        )
    return module


@pytest.fixture
def example_task(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> ExampleTask:
    """The example DAG's load task, parsed with the Airflow worker's environment from compose."""
    for key, value in environment(compose, AIRFLOW_WORKER).items():
        if key.startswith("EOD_"):
            monkeypatch.setenv(key, value)
    load = load_dag_file(EXAMPLE_DAG).dag.get_task("load_orders")
    return ExampleTask(
        load.execution, load.spark_conn_id, dict(load.spark_conf), load.landing_path, load.table_uri
    )


# -- the tests -------------------------------------------------------------------------


def test_spark_master_runs_the_cluster_tiers_command(compose: dict[str, Any]) -> None:
    check_spark_master(compose)


def test_spark_worker_runs_the_cluster_tiers_command(compose: dict[str, Any]) -> None:
    check_spark_worker(compose)


def test_airflow_services_run_the_scheduler_tiers_commands(
    compose: dict[str, Any], services_module: ModuleType
) -> None:
    check_airflow_commands(compose, services_module)


def test_airflow_settings_are_the_scheduler_tiers(
    compose: dict[str, Any], services_module: ModuleType
) -> None:
    check_airflow_settings(compose, services_module)
    assert environment(compose, AIRFLOW_WORKER)["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"


def test_one_image_with_this_python_pyspark_airflow_and_java_17(compose: dict[str, Any]) -> None:
    check_image(compose)


def test_airflow_is_installed_with_its_constraints(compose: dict[str, Any]) -> None:
    """Before issue 18 (item 20) the image installed Airflow without its constraints file."""
    check_constraints(compose)


def test_default_secrets_are_refused_unless_a_local_trial(compose: dict[str, Any]) -> None:
    """Before issue 18 (item 20) the stack started with the file's default admin password,
    JWT secret and database password."""
    check_secrets(compose)


def test_dags_folder_is_mounted(compose: dict[str, Any]) -> None:
    check_dags_mount(compose)


def test_landing_and_table_are_on_a_volume_shared_with_the_spark_worker(compose: dict[str, Any]) -> None:
    check_shared_data(compose)


def test_spark_connection_resolves_to_the_compose_master(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    check_spark_connection(compose, monkeypatch)


def test_example_dag_loads_in_submit_mode_on_the_compose_cluster(
    compose: dict[str, Any], example_task: ExampleTask
) -> None:
    check_example_dag(compose, example_task)


# -- every check can fail --------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation that sets ``services.<svc>.<key>...`` (dots) on one service only."""

    def mutate(compose: dict[str, Any]) -> None:
        keys = path.split(".")
        # Anchors make services share dicts: copy each level before writing.
        node = compose["services"]
        for key in keys[:-1]:
            node[key] = copy.copy(node[key])
            node = node[key]
        node[keys[-1]] = value

    return mutate


def _edit_command(name: str, old: str, new: str | None) -> Callable[[dict[str, Any]], None]:
    def mutate(compose: dict[str, Any]) -> None:
        cmd = list(compose["services"][name]["command"])
        i = cmd.index(old)
        if new is None:
            del cmd[i]
        else:
            cmd[i] = new
        compose["services"][name]["command"] = cmd

    return mutate


def _edit_env(name: str, key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def mutate(compose: dict[str, Any]) -> None:
        env = dict(compose["services"][name]["environment"])
        if value is None:
            env.pop(key)
        else:
            env[key] = value
        compose["services"][name]["environment"] = env

    return mutate


def _edit_build(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """Change the build every service shares (one anchor, one dict)."""

    def mutate(compose: dict[str, Any]) -> None:
        change(compose["services"][AIRFLOW_WORKER]["build"])

    return mutate


def _edit_volumes(name: str, old: str, new: str | None) -> Callable[[dict[str, Any]], None]:
    def mutate(compose: dict[str, Any]) -> None:
        vols = [v for v in compose["services"][name]["volumes"] if v != old]
        compose["services"][name]["volumes"] = vols + ([new] if new else [])

    return mutate


def _edit_init_script(change: Callable[[str], str]) -> Callable[[dict[str, Any]], None]:
    def mutate(compose: dict[str, Any]) -> None:
        cmd = list(compose["services"][INIT_SERVICE]["command"])
        cmd[-1] = change(cmd[-1])
        compose["services"][INIT_SERVICE]["command"] = cmd

    return mutate


def _conn(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(compose: dict[str, Any]) -> None:
        for name in AIRFLOW_SERVICES.values():
            conn = json.loads(environment(compose, name)["AIRFLOW_CONN_SPARK_DEFAULT"])
            for key, value in changes.items():
                if key in conn:
                    conn[key] = value
                else:
                    conn["extra"][key] = value
            _edit_env(name, "AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(conn))(compose)

    return mutate


SETTINGS = "settings"
COMMANDS = "commands"
CHECKS: dict[str, Callable[..., None]] = {
    "spark_master": check_spark_master,
    "spark_worker": check_spark_worker,
    "image": check_image,
    "constraints": check_constraints,
    "secrets": check_secrets,
    "dags_mount": check_dags_mount,
    "shared_data": check_shared_data,
}

MUTATIONS: list[tuple[str, str, Callable[[dict[str, Any]], None]]] = [
    ("master port", "spark_master", _edit_command(SPARK_MASTER, "7077", "7078")),
    ("master binds elsewhere", "spark_master", _edit_env(SPARK_MASTER, "SPARK_LOCAL_IP", "0.0.0.0")),
    ("worker cores", "spark_worker", _edit_command(SPARK_WORKER, "2", "4")),
    ("worker without a work dir", "spark_worker", _edit_command(SPARK_WORKER, "--work-dir", None)),
    ("worker without SPARK_LOCAL_IP", "spark_worker", _edit_env(SPARK_WORKER, "SPARK_LOCAL_IP", None)),
    ("scheduler serves logs", COMMANDS, _edit_command("airflow-scheduler", "--skip-serve-logs", None)),
    ("api-server on loopback", COMMANDS, _edit_command(API_SERVICE, "0.0.0.0", "127.0.0.1")),
    ("api-server workers", COMMANDS, _edit_command(API_SERVICE, "1", "4")),
    ("triggerer serves logs", COMMANDS, _edit_command("airflow-triggerer", "--skip-serve-logs", None)),
    ("executor", SETTINGS, _edit_env("airflow-dag-processor", "AIRFLOW__CORE__EXECUTOR", "CeleryExecutor")),
    ("a JWT secret of its own", SETTINGS, _edit_env(API_SERVICE, "AIRFLOW__API_AUTH__JWT_SECRET", "other")),
    (
        "no execution API URL",
        SETTINGS,
        _edit_env(INIT_SERVICE, "AIRFLOW__CORE__EXECUTION_API_SERVER_URL", None),
    ),
    (
        "metadata DB on localhost",
        SETTINGS,
        _edit_env(
            "airflow-scheduler",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
            "postgresql+psycopg2://airflow:airflow@localhost:5432/airflow",
        ),
    ),
    (
        "python 3.12",
        "image",
        _edit_build(lambda b: b.__setitem__("args", {**b["args"], "PYTHON_VERSION": "3.12"})),
    ),
    (
        "pyspark 4.1.0",
        "image",
        _edit_build(lambda b: b.__setitem__("args", {**b["args"], "PYSPARK_VERSION": "4.1.0"})),
    ),
    (
        "airflow 3.2.0",
        "image",
        _edit_build(lambda b: b.__setitem__("args", {**b["args"], "AIRFLOW_VERSION": "3.2.0"})),
    ),
    ("java 21", "image", _edit_build(lambda b: b.__setitem__("args", {**b["args"], "JAVA_VERSION": "21"}))),
    (
        "python hard-coded in FROM",
        "image",
        _edit_build(
            lambda b: b.__setitem__(
                "dockerfile_inline", b["dockerfile_inline"].replace("$${PYTHON_VERSION}-slim", "3.12-slim")
            )
        ),
    ),
    (
        "an unescaped Dockerfile variable",
        "image",
        _edit_build(
            lambda b: b.__setitem__("dockerfile_inline", b["dockerfile_inline"].replace("$${JAVA", "${JAVA"))
        ),
    ),
    ("a Spark worker image of its own", "image", _set(f"{SPARK_WORKER}.image", "bitnami/spark:4.0")),
    ("worker without the checkout", "image", _edit_volumes(SPARK_WORKER, f".:{PACKAGE_MOUNT}:ro", None)),
    ("no dags mount", "dags_mount", _edit_volumes("airflow-dag-processor", "./dags:/opt/airflow/dags", None)),
    (
        "data elsewhere on the spark worker",
        "shared_data",
        _edit_volumes(SPARK_WORKER, "eod-data:/data", "eod-data:/shared"),
    ),
    (
        "table off the shared volume",
        "shared_data",
        _edit_env(AIRFLOW_WORKER, "EOD_SUBMIT_TABLE", "/tmp/orders"),
    ),
    (
        "airflow without constraints",
        "constraints",
        _edit_build(
            lambda b: b.__setitem__(
                "dockerfile_inline", re.sub(r"\\\n\s*--constraint [^\n]*", "", b["dockerfile_inline"])
            )
        ),
    ),
    (
        "constraints of another airflow",
        "constraints",
        _edit_build(
            lambda b: b.__setitem__(
                "dockerfile_inline",
                b["dockerfile_inline"].replace("constraints-$${AIRFLOW_VERSION}/", "constraints-3.2.0/"),
            )
        ),
    ),
    (
        "constraints of another python",
        "constraints",
        _edit_build(
            lambda b: b.__setitem__(
                "dockerfile_inline",
                b["dockerfile_inline"].replace("constraints-$${PYTHON_VERSION}.txt", "constraints-3.12.txt"),
            )
        ),
    ),
    (
        "a later step that can move airflow",
        "constraints",
        _edit_build(
            lambda b: b.__setitem__(
                "dockerfile_inline",
                re.sub(
                    r'"apache-airflow\[postgres\]==\$\$\{AIRFLOW_VERSION\}" \\\n\s*"pyspark==',
                    '"pyspark==',
                    b["dockerfile_inline"],
                ),
            )
        ),
    ),
    ("no secrets check", "secrets", _edit_init_script(lambda s: s.split("EOF\n", 1)[1])),
    (
        "secrets checked after the migration",
        "secrets",
        _edit_init_script(lambda s: "airflow db migrate\n" + s.replace("airflow db migrate\n", "", 1)),
    ),
    ("a trial by default", "secrets", _edit_env(INIT_SERVICE, "EOD_LOCAL_TRIAL", "${EOD_LOCAL_TRIAL:-1}")),
    (
        "a JWT default the check does not know",
        "secrets",
        _edit_env(INIT_SERVICE, "AIRFLOW__API_AUTH__JWT_SECRET", "${AIRFLOW_JWT_SECRET:-another-default}"),
    ),
    (
        "the admin password unchecked",
        "secrets",
        _edit_init_script(lambda s: s.replace('("admin", ', '("nobody", ')),
    ),
    (
        "the triggerer does not wait for init",
        "secrets",
        _set("airflow-triggerer.depends_on", {"postgres": {"condition": "service_healthy"}}),
    ),
    ("connection port", "connection", _conn(port=7078)),
    ("cluster deploy mode", "connection", _conn(**{"deploy-mode": "cluster"})),
    (
        "driver advertises a bad address",
        "connection",
        _edit_env(AIRFLOW_WORKER, "SPARK_LOCAL_IP", "127.0.0.1"),
    ),
]

TASK_MUTATIONS: list[tuple[str, Callable[[ExampleTask], ExampleTask]]] = [
    ("local mode", lambda t: replace(t, execution="local")),
    ("another connection", lambda t: replace(t, spark_conn_id="spark_yarn")),
    (
        "the venv's python",
        lambda t: replace(t, spark_conf={**t.spark_conf, "spark.pyspark.python": sys.executable}),
    ),
    ("more cores than the worker", lambda t: replace(t, spark_conf={**t.spark_conf, "spark.cores.max": "8"})),
    ("another table", lambda t: replace(t, table_uri="/data/lake/other")),
]


@pytest.fixture
def run_check(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str, dict[str, Any]], None]]:
    def run(check: str, compose: dict[str, Any]) -> None:
        # Only the Airflow checks need the scheduler tier's module (and skip without it).
        if check == COMMANDS:
            check_airflow_commands(compose, request.getfixturevalue("services_module"))
        elif check == SETTINGS:
            check_airflow_settings(compose, request.getfixturevalue("services_module"))
        elif check == "connection":
            check_spark_connection(compose, monkeypatch)
        else:
            CHECKS[check](compose)

    yield run


@pytest.mark.parametrize(("what", "check", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_check_fails_on_a_broken_compose_file(
    what: str,
    check: str,
    mutate: Callable[[dict[str, Any]], None],
    run_check: Callable[[str, dict[str, Any]], None],
) -> None:
    broken = load_compose()
    run_check(check, broken)  # whole, it passes
    mutate(broken)
    with pytest.raises(AssertionError):
        run_check(check, broken)


@pytest.mark.parametrize(("what", "mutate"), TASK_MUTATIONS, ids=[m[0] for m in TASK_MUTATIONS])
def test_the_example_dag_check_fails_on_a_changed_task(
    what: str,
    mutate: Callable[[ExampleTask], ExampleTask],
    compose: dict[str, Any],
    example_task: ExampleTask,
) -> None:
    with pytest.raises(AssertionError):
        check_example_dag(compose, mutate(example_task))


# -- the runbook's way to clear a task (issue 18, item 18) ----------------------------------

RUNBOOK = os.path.join(REPO, "docs", "runbook.md")


def runbook_clear_request(path: str = RUNBOOK) -> tuple[str, dict[str, Any]]:
    """The REST call the runbook gives for clearing one task of one run: (path, JSON body)."""
    with open(path) as fh:
        text = fh.read()
    match = re.search(
        r'curl [^\n]*-X POST "\$AIRFLOW(?P<path>/api/v2/dags/[^"]+/clearTaskInstances)"'
        r"(?P<rest>(?:[^\n]*\\\n)*[^\n]*)",
        text,
    )
    assert match, "the runbook gives no clearTaskInstances call"
    body = re.search(r"-d '(\{[^']*\})'", match.group("rest"))
    assert body, "the runbook's clearTaskInstances call has no JSON body"
    return match.group("path"), json.loads(body.group(1))


def check_runbook_clear(path: str, body: dict[str, Any]) -> None:
    """The call exists in the installed Airflow, its body is valid there, and it clears one task
    of one run by run id (a manual run has no logical date), for real (``dry_run`` defaults
    to true), whatever state the task ended in."""
    from airflow.api_fastapi.core_api.datamodels.task_instances import ClearTaskInstancesBody
    from airflow.api_fastapi.core_api.routes.public import public_router

    routes = {(r.path, m) for r in public_router.routes for m in getattr(r, "methods", ())}
    assert (re.sub(r"/dags/[^/]+/", "/dags/{dag_id}/", path), "POST") in routes, path
    parsed = ClearTaskInstancesBody.model_validate(body)  # strict: an unknown field fails
    assert parsed.dry_run is False, "dry_run defaults to true: nothing would be cleared"
    assert parsed.dag_run_id and parsed.dag_run_id.startswith("manual__"), parsed.dag_run_id
    assert parsed.task_ids and len(parsed.task_ids) == 1, parsed.task_ids
    assert parsed.only_failed is False and parsed.reset_dag_runs is True
    # Airflow refuses these for a run without a logical date; dates select by logical date.
    assert not (parsed.include_past or parsed.include_future or parsed.start_date or parsed.end_date)
    # Only fields Airflow 3.1 (the lowest we support) knows too.
    assert set(body) <= {
        "dry_run",
        "start_date",
        "end_date",
        "only_failed",
        "only_running",
        "reset_dag_runs",
        "task_ids",
        "dag_run_id",
        "include_upstream",
        "include_downstream",
        "include_future",
        "include_past",
    }, sorted(body)


def test_the_runbook_says_how_to_clear_a_task_of_a_manual_run() -> None:
    """Before issue 18 (item 18) the runbook said "clear the task", which ``airflow tasks
    clear -s/-e`` cannot do for a manual run (no logical date), and said nothing else."""
    from airflow.api_fastapi.auth.managers.simple.routes.login import login_router

    check_runbook_clear(*runbook_clear_request())
    with open(RUNBOOK) as fh:
        text = fh.read()
    assert '-X POST "$AIRFLOW/auth/token"' in text
    assert ("/token", "POST") in {(r.path, m) for r in login_router.routes for m in getattr(r, "methods", ())}
    assert "Clear Task Instance" in text, "the UI's way"


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("a dry run", {"dry_run": True}),
        ("by dates", {"dag_run_id": None, "start_date": "2026-11-20T00:00:00Z"}),
        ("only failed", {"only_failed": True}),
        ("a 3.3-only field", {"note": "cleared by hand"}),
        ("an unknown field", {"run_id": "manual__x"}),
    ],
)
def test_the_runbook_check_fails_on_a_wrong_call(what: str, change: dict[str, Any]) -> None:
    path, body = runbook_clear_request()
    broken = {k: v for k, v in {**body, **change}.items() if v is not None}
    with pytest.raises((AssertionError, ValueError)):
        check_runbook_clear(path, broken)
    with pytest.raises(AssertionError):
        check_runbook_clear(path.replace("clearTaskInstances", "clearTasks"), body)
