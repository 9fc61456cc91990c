"""The ``code_interpreter`` tool with the ``openai`` SDK, over real HTTP, running real code in
real sandboxes (bubblewrap): on the in-process app (sandboxes in the server's process) and on
Ray Serve's apps (one detached Ray actor per container).

The sim model calls the tool when told ``[[python]]CODE[[/python]]`` and answers with what
the call returned, so each answer's text is the model's view of the run.

The escape attempts run on an in-process app of their own, with small limits, and each must
end as a clear error in the call's output, with the server (and the container) still serving.
"""

from __future__ import annotations

import base64
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.servers import named_actor_exists, served_local, wait_for
from troupe.runtime.ray.containers import container_actor_name
from troupe.runtime.settings import ContainersSettings
from troupe.serve.config import ServerSettings

from .conftest import LOCAL_ONLY

AUTO = [{"type": "code_interpreter", "container": {"type": "auto"}}]
INCLUDE = ["code_interpreter_call.outputs"]
CSV = b"city,temperature\nParis,21\nOslo,9\nLisbon,24\n"


@pytest.fixture
def client(containers_client: OpenAI) -> OpenAI:
    return containers_client


def run(client: OpenAI, code: str, *, tools: list[dict[str, Any]] = AUTO, **options: Any) -> Any:
    return client.responses.create(model="sim", input=f"[[python]]{code}[[/python]]", tools=tools,  # type: ignore[arg-type]
                                   include=INCLUDE, **options)  # type: ignore[arg-type]  # fmt: skip


def the_call(response: Any) -> Any:
    [item] = [o for o in response.output if o.type == "code_interpreter_call"]
    return item


def logs_of(item: Any) -> str:
    return "".join(o.logs for o in item.outputs if o.type == "logs")


@LOCAL_ONLY  # the actor's path: the tests of state, files and the network
def test_arithmetic_runs_in_a_new_container(client: OpenAI) -> None:
    response = run(client, "print(sum(range(101)))")
    call = the_call(response)
    assert (call.status, logs_of(call), call.code) == ("completed", "5050\n", "print(sum(range(101)))")
    assert call.id.startswith("ci_") and call.container_id.startswith("cntr_")
    container = client.containers.retrieve(call.container_id)
    assert (container.name, container.status, container.memory_limit) == ("code_interpreter", "running", "1g")
    assert "5050" in response.output_text


def test_state_lives_from_one_call_to_the_next(client: OpenAI) -> None:
    first = run(client, "x = 6 * 7")
    second = run(client, "print(x)", previous_response_id=first.id)
    assert logs_of(the_call(second)) == "42\n"
    assert the_call(second).container_id == the_call(first).container_id  # the thread's container, reused
    # A later turn's auto container may bring files: the reused container gets those it lacks.
    added = client.files.create(file=("later.csv", CSV), purpose="assistants").id
    tools = [{"type": "code_interpreter", "container": {"type": "auto", "file_ids": [added]}}]
    third = run(client, "import os\nprint(x, sorted(os.listdir('.')))", tools=tools, previous_response_id=second.id)
    assert logs_of(the_call(third)) == "42 ['later.csv']\n"
    fourth = run(client, "print(sorted(os.listdir('.')))", tools=tools, previous_response_id=third.id)
    assert logs_of(the_call(fourth)) == "['later.csv']\n"  # not copied twice


def test_a_csv_in_and_a_derived_file_out(client: OpenAI) -> None:
    file_id = client.files.create(file=("weather.csv", CSV), purpose="assistants").id
    code = (
        "import pandas as pd\n"
        "df = pd.read_csv('/mnt/data/weather.csv')\n"
        "warm = df[df.temperature > 20].sort_values('city')\n"
        "warm.to_csv('/mnt/data/warm.csv', index=False)\n"
        "print(len(warm))"
    )
    tools = [{"type": "code_interpreter", "container": {"type": "auto", "file_ids": [file_id]}}]
    response = run(client, code, tools=tools)
    call = the_call(response)
    assert (call.status, logs_of(call)) == ("completed", "2\n")
    [citation] = [a for o in response.output if o.type == "message" for c in o.content for a in c.annotations]
    assert (citation.type, citation.container_id, citation.filename) == ("container_file_citation", call.container_id,
                                                                          "warm.csv")  # fmt: skip
    text = response.output_text
    assert text[citation.start_index : citation.end_index] == "sandbox:/mnt/data/warm.csv"
    content = client.containers.files.content.retrieve(citation.file_id, container_id=call.container_id).read()
    assert content == b"city,temperature\nLisbon,24\nParis,21\n"
    listed = {f.path: f.source for f in client.containers.files.list(container_id=call.container_id)}
    assert listed == {"/mnt/data/weather.csv": "user", "/mnt/data/warm.csv": "assistant"}


@LOCAL_ONLY  # the actor's path: the tests of state, files and the network
def test_a_matplotlib_figure_comes_back_as_an_image(client: OpenAI) -> None:
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9, 16])\nplt.title('squares')"
    call = the_call(run(client, code))
    [image] = [o for o in call.outputs if o.type == "image"]
    prefix = "data:image/png;base64,"
    assert image.url.startswith(prefix)
    png = base64.b64decode(image.url[len(prefix) :])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000


@LOCAL_ONLY  # the actor's path: the tests of state, files and the network
def test_the_stream_tells_the_call_in_openais_order(client: OpenAI) -> None:
    code = "print('streamed')"
    events = list(client.responses.create(model="sim", input=f"[[python]]{code}[[/python]]", tools=AUTO,  # type: ignore[arg-type]
                                          include=INCLUDE, stream=True))  # type: ignore[arg-type]  # fmt: skip
    item_id = next(e.item.id for e in events if e.type == "response.output_item.added")
    of_call = [e for e in events if getattr(e, "item_id", None) == item_id or getattr(getattr(e, "item", None), "id", None) == item_id]
    kinds = [e.type for e in of_call]
    deltas = [e for e in of_call if e.type == "response.code_interpreter_call_code.delta"]
    assert kinds == ["response.output_item.added", "response.code_interpreter_call.in_progress",
                     *["response.code_interpreter_call_code.delta"] * len(deltas),
                     "response.code_interpreter_call_code.done", "response.code_interpreter_call.interpreting",
                     "response.code_interpreter_call.completed", "response.output_item.done"]  # fmt: skip
    assert deltas and "".join(e.delta for e in deltas) == code
    done = of_call[-1].item
    assert (done.status, logs_of(done)) == ("completed", "streamed\n")
    assert [e.sequence_number for e in events] == list(range(len(events)))


@pytest.mark.parametrize("placement", ["replica", "pooled"])
def test_a_container_of_the_api_serves_two_conversations_then_goes(troupe_apps, troupe_app_settings,
                                                                   placement: str) -> None:  # fmt: skip
    """On Ray, one actor per container: two conversations (on any of the hosts) share its
    kernel; deleting the container stops the actor, and a request naming it is then a 404."""
    client = OpenAI(base_url=f"{troupe_apps[placement]}/v1", api_key="unused", max_retries=0)
    made = client.containers.create(name=f"shared-{uuid.uuid4().hex[:6]}")
    tools = [{"type": "code_interpreter", "container": made.id}]
    first = client.conversations.create()
    second = client.conversations.create()
    run(client, "counter = 1", tools=tools, conversation=first.id)
    call = the_call(run(client, "counter += 1\nprint(counter)", tools=tools, conversation=second.id))
    assert (call.container_id, logs_of(call)) == (made.id, "2\n")

    namespace = troupe_app_settings[placement].namespace
    assert named_actor_exists(container_actor_name(made.id), namespace)
    client.containers.delete(made.id)
    wait_for(lambda: not named_actor_exists(container_actor_name(made.id), namespace), what="the container's actor gone")
    with pytest.raises(openai.NotFoundError) as refused:
        run(client, "print(counter)", tools=tools)
    assert refused.value.body["param"] == "tools[0].container"


# -- escapes, on an app of their own with small limits -------------------------------------------

SECRET = "troupe-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def jail(tmp_path_factory) -> Iterator[tuple[OpenAI, Path]]:
    """A client of an in-process app with small limits, and the directory of its DuckDB file
    (with a secret file beside it); the server's environment holds SECRET."""
    directory = tmp_path_factory.mktemp("jail")
    (directory / "secret.txt").write_text(SECRET)
    os.environ["TROUPE_TEST_SECRET"] = SECRET
    limits = ContainersSettings(call_timeout_s=4, cpu_seconds=30, max_processes=32, max_disk_bytes=16 << 20)
    try:
        for url in served_local(ServerSettings(), storage_path=str(directory / "troupe.duckdb"), containers=limits):
            yield OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0), directory
    finally:
        os.environ.pop("TROUPE_TEST_SECRET", None)


@pytest.fixture(scope="module")
def jailed(jail) -> str:
    """The container the escape attempts run in, one after another."""
    client, _ = jail
    return client.containers.create(name="jail").id


def attempt(jail: tuple[OpenAI, Path], container_id: str, code: str) -> Any:
    client, _ = jail
    call = the_call(run(client, code, tools=[{"type": "code_interpreter", "container": container_id}]))
    after = the_call(run(client, "print('still serving')", tools=[{"type": "code_interpreter", "container": container_id}]))
    assert (after.status, logs_of(after)) == ("completed", "still serving\n")
    return call


def test_no_connection_to_the_hosts_loopback(jail, jailed) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)"
        call = attempt(jail, jailed, code)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody came
    assert call.status == "completed" and ("ConnectionRefusedError" in logs_of(call) or "unreachable" in logs_of(call))


def test_no_file_beside_the_duckdb_file(jail, jailed) -> None:
    _, directory = jail
    for path in (directory / "secret.txt", directory / "troupe.duckdb"):
        call = attempt(jail, jailed, f"print(open({str(path)!r}, 'rb').read()[:100])")
        assert call.status == "completed" and "FileNotFoundError" in logs_of(call) and SECRET not in logs_of(call)


def test_no_variable_of_the_servers_environment(jail, jailed) -> None:
    call = attempt(jail, jailed, "import os\nprint(dict(os.environ))\nprint(open('/proc/1/environ', 'rb').read())")
    assert call.status == "completed" and SECRET not in logs_of(call) and "TROUPE" not in logs_of(call)


def test_memory_past_the_limit(jail, jailed) -> None:
    call = attempt(jail, jailed, "hog = bytearray(3 * 1024 ** 3)")
    assert call.status == "incomplete" and "MemoryError" in logs_of(call)


def test_an_endless_loop_is_stopped(jail, jailed) -> None:
    call = attempt(jail, jailed, "while True:\n    pass")
    assert call.status == "incomplete" and "timeout" in logs_of(call) and "restarted" in logs_of(call)


def test_a_fork_bomb_is_stopped(jail, jailed) -> None:
    call = attempt(jail, jailed, "import os\nwhile True:\n    os.fork()")
    assert call.status == "incomplete" and "process limit" in logs_of(call)


def test_filling_the_disk_is_stopped(jail, jailed) -> None:
    code = "import time\nfor i in range(100):\n    open(f'fill{i}', 'wb').write(b'x' * (1 << 20))\n    time.sleep(0.01)"
    call = attempt(jail, jailed, code)
    assert call.status == "incomplete" and "disk limit" in logs_of(call)
    client, _ = jail
    for f in client.containers.files.list(container_id=jailed, limit=100):
        client.containers.files.delete(f.id, container_id=jailed)


def test_nothing_outside_mnt_data_is_written(jail, jailed) -> None:
    code = "for path in ('/usr/evil', '/etc/evil', '/opt/troupe/evil', '/evil'):\n    try:\n        open(path, 'w')\n    except OSError as exc:\n        print(type(exc).__name__)"
    call = attempt(jail, jailed, code)
    printed = logs_of(call).split()
    assert call.status == "completed" and len(printed) == 4 and set(printed) <= {"OSError", "PermissionError"}


def test_a_tenant_cannot_use_another_tenants_container() -> None:
    keys = {"sk-alice": "alice", "sk-bob": "bob"}
    for url in served_local(ServerSettings(api_keys=keys)):
        alice = OpenAI(base_url=f"{url}/v1", api_key="sk-alice", max_retries=0)
        bob = OpenAI(base_url=f"{url}/v1", api_key="sk-bob", max_retries=0)
        alices = the_call(run(alice, "open('/mnt/data/diary.txt', 'w').write('dear diary')")).container_id
        with pytest.raises(openai.NotFoundError) as refused:
            run(bob, "print(open('/mnt/data/diary.txt').read())", tools=[{"type": "code_interpreter", "container": alices}])
        assert refused.value.body["param"] == "tools[0].container"
        bobs = the_call(run(bob, "import os\nprint(os.listdir('/mnt/data'))"))
        assert bobs.container_id != alices and logs_of(bobs) == "[]\n"
        [diary] = alice.containers.files.list(container_id=alices).data
        assert alice.containers.files.content.retrieve(diary.id, container_id=alices).read() == b"dear diary"


def test_metrics_count_kernels_limits_and_running_containers(jail, jailed) -> None:
    client, _ = jail
    attempt(jail, jailed, "import os\nwhile True:\n    os.fork()")  # a limit hit, then a new kernel
    text = httpx.get(str(client.base_url).removesuffix("/v1/") + "/metrics").text
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#")}  # fmt: skip
    assert values['troupe_container_limit_hits_total{kind="python",limit="processes"}'] >= 1
    assert values["troupe_container_starts_total"] >= 2  # the container's first kernel, and the one after the limit
    assert values["troupe_containers_running"] >= 1
    assert values['troupe_tool_call_duration_seconds_count{tool="python",outcome="ok"}'] >= 2


def test_without_bubblewrap_the_tool_is_refused_and_says_what_to_install() -> None:
    missing = ContainersSettings(bwrap="/nonexistent/bwrap")
    for url in served_local(ServerSettings(), containers=missing):
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.InternalServerError) as refused:
            run(client, "print(1)")
        error = refused.value.body
        assert (error["code"], error["param"]) == ("sandbox_unavailable", "tools[0]")
        assert "apt-get install bubblewrap" in error["message"] and "/nonexistent/bwrap" in error["message"]
        assert client.responses.create(model="sim", input="plain").status == "completed"  # the rest serves


def test_only_the_tenants_the_configuration_names_run_code() -> None:
    keys = {"sk-alice": "alice", "sk-bob": "bob"}
    for url in served_local(ServerSettings(api_keys=keys), containers=ContainersSettings(code_tenants=("alice",))):
        alice = OpenAI(base_url=f"{url}/v1", api_key="sk-alice", max_retries=0)
        bob = OpenAI(base_url=f"{url}/v1", api_key="sk-bob", max_retries=0)
        assert logs_of(the_call(run(alice, "print(2 ** 10)"))) == "1024\n"
        with pytest.raises(openai.BadRequestError) as refused:
            run(bob, "print(2 ** 10)")
        assert (refused.value.body["param"], refused.value.body["code"]) == ("tools[0].type", "unsupported_value")


def test_a_network_allowlist_reaches_only_public_addresses_of_its_domains(client: OpenAI) -> None:
    """The container's egress proxy refuses a domain not listed, and a listed one whose address
    is the server's own (no test here may reach the internet: both answers are the proxy's)."""
    made = client.containers.create(name="net", network_policy={"type": "allowlist", "allowed_domains": ["localhost"]})
    assert (made.network_policy.type, made.network_policy.allowed_domains) == ("allowlist", ["localhost"])
    code = (
        "import os, urllib.request, urllib.error\nprint(os.environ['HTTPS_PROXY'])\n"
        "del os.environ['NO_PROXY'], os.environ['no_proxy']  # localhost too through the proxy\n"
        "for url in ('http://localhost/', 'http://example.com/'):\n"
        "    try:\n        urllib.request.urlopen(url, timeout=10)\n"
        "    except urllib.error.HTTPError as exc:\n        print(exc.code, exc.read().decode().strip())"
    )
    printed = logs_of(the_call(run(client, code, tools=[{"type": "code_interpreter", "container": made.id}])))
    proxy, local, other = printed.splitlines()
    assert proxy == "http://127.0.0.1:3128"
    assert local.startswith("403 Troupe's egress proxy: localhost resolves to no public address"), local
    assert other == "403 Troupe's egress proxy: example.com is not in this container's network allowlist (localhost)."


def test_a_server_may_allow_no_network_at_all() -> None:
    for url in served_local(ServerSettings(), containers=ContainersSettings(network_allowlists=False)):
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        policy = {"type": "allowlist", "allowed_domains": ["pypi.org"]}
        with pytest.raises(openai.BadRequestError) as refused:
            client.containers.create(name="net", network_policy=policy)  # type: ignore[arg-type]
        assert (refused.value.body["param"], refused.value.body["code"]) == ("network_policy", "unsupported_value")
        with pytest.raises(openai.BadRequestError) as refused:
            run(client, "print(1)", tools=[{"type": "code_interpreter", "container": {"type": "auto", "network_policy": policy}}])
        assert refused.value.body["param"] == "tools[0].container.network_policy"
