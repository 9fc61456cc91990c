"""``troupe.serve.config``: defaults, every TOML section, environment overrides, errors."""

from __future__ import annotations

import pickle
import tomllib
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from troupe.runtime.settings import DEFAULT_TOOLS, GuardrailRule, McpServerSpec, ModelSpec, RuntimeSettings, ToolSpec
from troupe.serve.config import (
    ENV_SHORT_NAMES,
    ConfigError,
    ServerSettings,
    TroupeConfig,
    load_config,
    parse_api_keys,
    tenant_of_key,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "troupe.example.toml"


@pytest.fixture
def write(tmp_path: Path):
    def _write(text: str) -> Path:
        path = tmp_path / "troupe.toml"
        path.write_text(text)
        return path

    return _write


def test_no_file_no_env_is_the_embedded_defaults():
    server, runtime = load_config(None, env={})
    assert server == ServerSettings()
    assert (server.host, server.port, dict(server.api_keys), server.ray_address) == ("127.0.0.1", 8000, {}, None)
    assert server.max_ongoing_requests >= 100, "Serve's default of 5 would queue the sixth stream"
    assert runtime == RuntimeSettings()
    assert [m.name for m in runtime.models] == ["sim"]
    assert runtime.tools == DEFAULT_TOOLS


def test_unrelated_environment_is_ignored():
    assert load_config(None, env={"HOME": "/x", "PORT": "1"}) == load_config(None, env={})


def test_every_section(write):
    path = write(
        """
        [server]
        host = "0.0.0.0"
        port = 9001
        ray_address = "10.0.0.5:6379"
        num_replicas = 3
        max_ongoing_requests = 500
        ingress = "proxy"
        dashboard = true

        [auth]
        keys = { "sk-a" = "alice", "sk-b" = "bob" }

        [runtime]
        placement = "dedicated"
        pool_size = 8
        idle_timeout_s = 30
        storage_path = "/tmp/h.duckdb"
        client_tool_status = "requires_action"
        tool_runner = "task"
        tool_num_cpus = 0.5
        tool_timeout_s = 5
        cache_size = 10
        namespace = "t2"

        [[models]]
        name = "llama"
        kind = "openai"
        base_url = "http://127.0.0.1:8001/v1"
        upstream_model = "meta/llama"
        api_key_env = "LLAMA_KEY"

        [[models]]
        name = "sim-slow"
        kind = "sim"
        ttft_ms = 200
        itl_ms = 20.5

        [[tools]]
        name = "get_weather"
        target = "my.tools:get_weather"
        description = "Weather for a city."
        parameters = { type = "object", properties = { city = { type = "string" } } }
        num_cpus = 0
        """
    )
    server, runtime = load_config(path, env={})
    assert server == ServerSettings(
        host="0.0.0.0", port=9001, ray_address="10.0.0.5:6379", num_replicas=3, max_ongoing_requests=500,
        ingress="proxy", dashboard=True, api_keys={"sk-a": "alice", "sk-b": "bob"},
    )
    assert (runtime.placement, runtime.pool_size, runtime.idle_timeout_s) == ("dedicated", 8, 30.0)
    assert isinstance(runtime.idle_timeout_s, float), "TOML integers become floats for float options"
    assert (runtime.storage_path, runtime.client_tool_status) == ("/tmp/h.duckdb", "requires_action")
    assert (runtime.tool_runner, runtime.tool_num_cpus, runtime.tool_timeout_s) == ("task", 0.5, 5.0)
    assert runtime.cache_size == 10
    assert runtime.namespace == "t2"
    assert runtime.models == (
        ModelSpec(name="sim", kind="sim"),
        ModelSpec(name="llama", kind="openai", base_url="http://127.0.0.1:8001/v1", upstream_model="meta/llama",
                  api_key_env="LLAMA_KEY"),
        ModelSpec(name="sim-slow", kind="sim", ttft_ms=200.0, itl_ms=20.5),
    )
    weather = ToolSpec(
        name="get_weather", target="my.tools:get_weather", description="Weather for a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}}, num_cpus=0.0,
    )
    assert runtime.tools == DEFAULT_TOOLS + (weather,), "configured tools are added to the examples"
    pickle.loads(pickle.dumps((server, runtime)))  # both travel to Ray actors


def test_example_tools_and_sim_model_can_be_turned_off(write):
    path = write(
        """
        [runtime]
        example_tools = false
        sim_model = false
        [[models]]
        name = "m"
        base_url = "http://x/v1"
        [[tools]]
        name = "t"
        target = "a.b:c"
        """
    )
    _, runtime = load_config(path, env={})
    assert [m.name for m in runtime.models] == ["m"]
    assert [t.name for t in runtime.tools] == ["t"]
    assert runtime.models[0].kind == "openai", "kind defaults to an OpenAI-compatible server"


def test_a_configured_name_replaces_the_builtin(write):
    path = write(
        """
        [[models]]
        name = "sim"
        kind = "sim"
        ttft_ms = 50
        [[tools]]
        name = "calculator"
        target = "my.calc:evaluate"
        """
    )
    _, runtime = load_config(path, env={})
    assert runtime.models == (ModelSpec(name="sim", kind="sim", ttft_ms=50.0),)
    assert [t.name for t in runtime.tools] == ["sleep", "now", "calculator"]
    assert runtime.tools[-1].target == "my.calc:evaluate"


def test_tool_parameters_as_a_json_string(write):
    path = write('[[tools]]\nname = "t"\ntarget = "a:b"\nparameters = \'{"type": "object"}\'\n')
    assert load_config(path, env={})[1].tools[-1].parameters == {"type": "object"}


def test_keys_as_a_list_get_derived_tenants(write):
    server, _ = load_config(write('[auth]\nkeys = ["sk-a", "sk-b"]\n'), env={})
    assert dict(server.api_keys) == {"sk-a": tenant_of_key("sk-a"), "sk-b": tenant_of_key("sk-b")}
    assert tenant_of_key("sk-a") != tenant_of_key("sk-b")
    assert "sk-a" not in tenant_of_key("sk-a"), "the tenant name never carries the secret"


def test_parse_api_keys():
    assert parse_api_keys("sk-a=alice, sk-b=bob") == {"sk-a": "alice", "sk-b": "bob"}
    assert parse_api_keys("sk-a, sk-b=bob,") == {"sk-a": tenant_of_key("sk-a"), "sk-b": "bob"}
    assert parse_api_keys("") == {}
    for bad in ("sk-a=", "=alice"):
        with pytest.raises(ConfigError, match="TROUPE_API_KEYS"):
            parse_api_keys(bad)


def test_environment_overrides_the_file(write):
    path = write('[server]\nport = 9001\nhost = "0.0.0.0"\n[auth]\nkeys = {"sk-file" = "f"}\n'
                 '[runtime]\npool_size = 2\nstorage_path = "a.duckdb"\n')
    env = {
        "TROUPE_HOST": "127.0.0.2",
        "TROUPE_PORT": "9002",
        "TROUPE_STORAGE_PATH": ":memory:",
        "TROUPE_PLACEMENT": "dedicated",
        "TROUPE_POOL_SIZE": "16",
        "TROUPE_API_KEYS": "sk-env=e",
        "TROUPE_RAY_ADDRESS": "ray://head:10001",
        "TROUPE_INGRESS": "proxy",
    }
    server, runtime = load_config(path, env=env)
    assert (server.host, server.port, server.ray_address) == ("127.0.0.2", 9002, "ray://head:10001")
    assert server.ingress == "proxy"
    assert dict(server.api_keys) == {"sk-env": "e"}, "the environment's keys replace the file's"
    assert (runtime.storage_path, runtime.placement, runtime.pool_size) == (":memory:", "dedicated", 16)


def test_several_replicas_host_the_conversations_between_them(write):
    assert load_config(None, env={})[1].ingress_replicas == 1
    runtime = load_config(write("[server]\nnum_replicas = 2\n"), env={})[1]
    assert (runtime.placement, runtime.ingress_replicas) == ("replica", 2)
    assert load_config(write("[server]\nnum_replicas = 3\n"), env={"TROUPE_PLACEMENT": "pooled"})[1].placement == "pooled"


def test_empty_environment_variables_count_as_unset(write):
    path = write("[server]\nport = 9001\n")
    assert load_config(path, env={"TROUPE_PORT": "", "TROUPE_API_KEYS": " "})[0].port == 9001


def test_troupe_config_names_the_file(write):
    path = write("[server]\nport = 9005\n")
    assert load_config(None, env={"TROUPE_CONFIG": str(path)})[0].port == 9005


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[server]\nprot = 1\n", "'server.prot'"),
        ("[runtime]\npool_sze = 1\n", "'runtime.pool_sze'"),
        ("[auth]\nkey = []\n", "'auth.key'"),
        ("[serve]\nport = 1\n", "'serve'"),
        ('[[models]]\nname = "m"\nbase_url = "u"\nurl = "x"\n', "'models[0].url'"),
        ('[[tools]]\nname = "t"\ntarget = "a:b"\nfunc = "x"\n', "'tools[0].func'"),
    ],
)
def test_unknown_keys_are_named(write, text, named):
    with pytest.raises(ConfigError) as err:
        load_config(write(text), env={})
    assert f"unknown key {named}" in str(err.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('[server]\nport = "eighty"\n', "server.port: Input should be a valid integer"),
        ("[server]\nport = 70000\n", "server.port: Input should be less than or equal to 65535, got 70000"),
        ("[runtime]\npool_size = 0\n", "runtime.pool_size: Input should be greater than 0, got 0"),
        ('[runtime]\nplacement = "random"\n', "runtime.placement: Input should be 'replica', 'pooled' or 'dedicated'"),
        ('[server]\ningress = "haproxy"\n', "server.ingress: Input should be 'direct' or 'proxy', got 'haproxy'"),
        ('[runtime]\ntool_runner = "thread"\n', "runtime.tool_runner: Input should be 'actor' or 'task'"),
        ('[runtime]\nexample_tools = "maybe"\n', "runtime.example_tools: Input should be a valid boolean"),
        ("[runtime]\ntool_num_cpus = -1\n", "runtime.tool_num_cpus: Input should be greater than or equal to 0"),
        ('[runtime]\nstorage_memory_limit = "lots"\n', 'runtime.storage_memory_limit: expected a size such as "128MB"'),
        ('[runtime]\nstorage_path = ""\n', "runtime.storage_path: String should have at least 1 character"),
        ("[mcp]\ntimeout_s = 0\n", "mcp.timeout_s: Input should be greater than 0"),
        ('[[mcp.servers]]\nlabel = "x"\n', "mcp.servers[0]: give exactly one of 'url' (HTTP) and 'command' (stdio)"),
        ('[[models]]\nname = "m"\n', "models[0]: base_url is required for kind 'openai'"),
        ('[[models]]\nname = "m"\nkind = "vllm"\nbase_url = "u"\n', "models[0].kind: Input should be 'sim' or 'openai'"),
        ('[[models]]\nkind = "sim"\n', "models[0]: missing required key 'name'"),
        ('[[tools]]\nname = "t"\n', "tools[0]: missing required key 'target'"),
        ('[[tools]]\nname = "t"\ntarget = "no_colon"\n', "tools[0].target: must look like 'package.module:function'"),
        ('[[tools]]\nname = "t"\ntarget = "a:b"\nparameters = "{nope"\n', "tools[0]: parameters: not valid JSON"),
        ('[[tools]]\nname = "t"\ntarget = "a:b"\nnum_cpus = -0.5\n', "tools[0].num_cpus: Input should be greater than or equal to 0"),
        ('[[tools]]\nname = "t"\ntarget = "a:b"\n[[tools]]\nname = "t"\ntarget = "a:c"\n', "'t' is configured twice"),
        ('[auth]\nkeys = "sk-a"\n', "auth.keys: expected a table {key = tenant} or a list of keys"),
        ('[auth]\nkeys = {"sk-a" = 1}\n', "auth.keys.sk-a: Input should be a valid string"),
        ('[auth]\nkeys = {"sk-a" = ""}\n', "auth.keys.sk-a: String should have at least 1 character"),
        ("server = 1\n", "server: expected a table, got 1"),
        ("models = 1\n", "models: expected an array, got 1"),
        ("[server\n", "invalid TOML"),
    ],
)
def test_bad_values_are_located(write, text, fragment):
    with pytest.raises(ConfigError) as err:
        load_config(write(text), env={})
    assert fragment in str(err.value)
    assert str(err.value).startswith(str(write(text))), "errors name the file"


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"TROUPE_PORT": "eighty"}, "TROUPE_PORT: Input should be a valid integer"),
        ({"TROUPE_POOL_SIZE": "-2"}, "TROUPE_POOL_SIZE: Input should be greater than 0"),
        ({"TROUPE_PLACEMENT": "anywhere"}, "TROUPE_PLACEMENT: Input should be 'replica'"),
        ({"TROUPE_STORAGE_MEMORY_LIMIT": "12 parsecs"}, "TROUPE_STORAGE_MEMORY_LIMIT: expected a size"),
    ],
)
def test_bad_environment_is_named(env, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(None, env=env)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml", env={})


def test_every_error_is_reported_at_once(write):
    with pytest.raises(ConfigError) as err:
        load_config(write('[server]\nport = 0\n[runtime]\npool_size = 0\n'), env={})
    assert "server.port" in str(err.value) and "runtime.pool_size" in str(err.value)


def _tables() -> dict[str, type[BaseModel]]:
    """Each table of the file and the model that declares its options."""
    tables = {}
    for name, field in TroupeConfig.model_fields.items():
        model = typing.get_args(field.annotation)[0] if name in ("models", "tools", "guardrails") else field.annotation
        tables[name] = model
    tables["mcp.servers"] = McpServerSpec
    tables["guardrails.rules"] = GuardrailRule
    return tables


def test_every_option_is_documented_in_its_model():
    tables = _tables()
    assert set(tables) == {"server", "limits", "auth", "runtime", "models", "tools", "guardrails", "guardrails.rules",
                           "mcp", "mcp.servers", "telemetry", "containers", "webhooks", "web_search"}
    for table, model in tables.items():
        assert model.__doc__, f"[{table}] has no description"
        for name, field in model.model_fields.items():
            assert field.description, f"{table}.{name} has no docstring"


def test_the_example_file_shows_every_option_with_its_default():
    server, runtime = load_config(EXAMPLE, env={})
    assert [m.name for m in runtime.models] == ["sim", "llama", "sim-slow"]
    assert [t.name for t in runtime.tools][-1] == "get_weather"
    assert [s.label for s in runtime.mcp.servers] == ["docs", "files"]
    text = EXAMPLE.read_text()
    # Every key appears as `key =` (commented out where the default is "unset").
    doc = tomllib.loads(text.replace("# keys =", "keys =", 1))
    for table, model in _tables().items():
        for name, field in model.model_fields.items():
            shown = f"{name} =" in text or f"[[{table}.{name}]]" in text
            assert shown, f"{table}.{name} is not in docs/troupe.example.toml"
            if table in ("server", "limits", "runtime", "telemetry", "containers", "webhooks", "web_search") and \
                    name in doc[table]:
                default = field.get_default(call_default_factory=True)
                default = list(default) if isinstance(default, tuple) else default  # a TOML array
                assert doc[table][name] == default, (
                    f"{table}.{name}: the example should show the default"
                )
    for var in (*ENV_SHORT_NAMES, "TROUPE_CONFIG", "TROUPE_<TABLE>__<KEY>"):
        assert var in text, f"{var} is not in docs/troupe.example.toml"


def test_every_option_has_an_environment_variable():
    env = {"TROUPE_LIMITS__MAX_WAIT_S": "5", "TROUPE_RUNTIME__CACHE_SIZE": "7", "TROUPE_SERVER__DASHBOARD": "true",
           "TROUPE_MCP__LIST_TTL_S": "1", "TROUPE_RUNTIME__EXAMPLE_TOOLS": "false",
           "TROUPE_MODELS": '[{"name": "m", "base_url": "http://127.0.0.1:1/v1"}]'}
    server, runtime = load_config(None, env=env)
    assert (server.max_wait_s, server.dashboard, runtime.cache_size, runtime.mcp.list_ttl_s) == (5.0, True, 7, 1.0)
    assert runtime.tools == () and [m.name for m in runtime.models] == ["sim", "m"]
    with pytest.raises(ConfigError, match=r"^TROUPE_LIMITS__MAX_WAIT_S: Input should be greater than 0"):
        load_config(None, env={"TROUPE_LIMITS__MAX_WAIT_S": "-1"})


def test_mcp_allowed_urls_from_the_environment(write):
    path = write('[mcp]\nallowed_urls = ["https://file.example/*"]\n')
    runtime = load_config(path, env={"TROUPE_MCP_ALLOWED_URLS": "http://127.0.0.1:*, https://a.example/*,"})[1]
    assert runtime.mcp.allowed_urls == ("http://127.0.0.1:*", "https://a.example/*"), "the variable replaces the file's"


def test_storage_memory_limit_from_file_and_environment(write):
    assert load_config(None, env={})[1].storage_memory_limit == "128MB"
    assert load_config(write('[runtime]\nstorage_memory_limit = "1.5GiB"\n'), env={})[1].storage_memory_limit == "1.5GiB"
    assert load_config(write('[runtime]\nstorage_memory_limit = ""\n'), env={})[1].storage_memory_limit == ""
    assert load_config(None, env={"TROUPE_STORAGE_MEMORY_LIMIT": "512MB"})[1].storage_memory_limit == "512MB"


def test_admin_keys_and_sql_limits_from_file_and_environment(write):
    server = load_config(None, env={})[0]
    assert (server.admin_keys, server.sql_timeout_s, server.sql_max_rows) == ((), 10.0, 10_000)
    path = write('[auth]\nadmin_keys = ["sk-op"]\n\n[limits]\nsql_timeout_s = 2.5\nsql_max_rows = 50\n')
    server = load_config(path, env={})[0]
    assert (server.admin_keys, server.sql_timeout_s, server.sql_max_rows) == (("sk-op",), 2.5, 50)
    assert "sk-op" not in repr(server), "a key is never shown"
    assert load_config(path, env={"TROUPE_ADMIN_KEYS": "sk-a, sk-b,"})[0].admin_keys == ("sk-a", "sk-b")
    with pytest.raises(ConfigError, match="auth.admin_keys"):
        load_config(write('[auth]\nadmin_keys = [""]\n'), env={})


def test_the_containers_table_from_file_and_environment(write):
    path = write('[containers]\nmax_memory_limit = "16g"\ndirectory = "/srv/boxes"\nmax_file_bytes = 1024\n')
    containers = load_config(path, env={"TROUPE_CONTAINERS__DEFAULT_EXPIRES_MINUTES": "5"})[1].containers
    assert (containers.max_memory_limit, containers.directory, containers.max_file_bytes) == ("16g", "/srv/boxes", 1024)
    assert (containers.default_expires_minutes, containers.isolation) == (5, "bwrap")
    with pytest.raises(ConfigError, match="containers.max_memory_limit"):
        load_config(write('[containers]\nmax_memory_limit = "2g"\n'), env={})
    with pytest.raises(ConfigError, match="default_expires_minutes \\(30\\) is more than max_expires_minutes \\(10\\)"):
        load_config(write("[containers]\ndefault_expires_minutes = 30\nmax_expires_minutes = 10\n"), env={})
