"""The containers area of the store contract (troupe.storage.contract.Containers), on DuckDB in
memory and on a file, with the containers' directories on disk: rows, bytes, expiry, tenants,
and files written by code (registered, never read through a link)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from troupe.protocol import InvalidRequest, NotFound
from troupe.storage import DuckDBStore, StorageError
from troupe.storage.container_files import ContainerDirs
from troupe.storage.duckdb_store.containers import ContainerTables
from troupe.storage.rag import RagStore

T0 = 1_760_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    store: DuckDBStore
    rag: RagStore
    containers: ContainerTables
    clock: Clock

    def file(self, tenant: str, file_id: str, filename: str, data: bytes) -> str:
        """A file of the Files API."""
        self.rag.create_file(tenant, {"id": file_id, "created_at": T0, "filename": filename, "purpose": "assistants",
                                      "expires_at": None}, data)  # fmt: skip
        return file_id

    def container(self, tenant: str = "acme", cid: str = "cntr_1", *, name: str = "work", minutes: int = 20,
                  file_ids: tuple[str, ...] = (), created_at: float | None = None) -> dict:  # fmt: skip
        spec = {"id": cid, "name": name, "created_at": created_at or self.clock(), "expires_minutes": minutes,
                "memory_limit": "1g", "network_policy": {"type": "disabled"}}  # fmt: skip
        return self.containers.create_container(tenant, spec, list(file_ids))

    def directory(self, cid: str = "cntr_1") -> Path:
        return Path(self.containers.dirs.path(cid))


def _open(path: str | None) -> Env:
    store = DuckDBStore(path)
    rag = RagStore(store.cursor, store.path)
    clock = Clock()
    return Env(store, rag, ContainerTables(store.cursor(), rag.file_bytes, ContainerDirs.beside(store.path), clock), clock)


def _close(env: Env) -> None:
    env.containers.close()
    env.rag.close()
    env.store.close()


@pytest.fixture(params=["memory", "file"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    opened = _open(None if request.param == "memory" else str(tmp_path / "t.duckdb"))
    yield opened
    _close(opened)


# -- containers ----------------------------------------------------------------------


def test_create_copies_the_tenants_files_into_the_directory(env: Env) -> None:
    a = env.file("acme", "file-a", "data.csv", b"x,y\n1,2\n")
    b = env.file("acme", "file-b", "reports/data.csv", b"other")  # the same name: OpenAI's prefixed form
    made = env.container(file_ids=(a, b))
    assert made == {
        "id": "cntr_1", "object": "container", "name": "work", "created_at": int(T0), "status": "running",
        "expires_after": {"anchor": "last_active_at", "minutes": 20}, "last_active_at": int(T0),
        "memory_limit": "1g", "network_policy": {"type": "disabled"},
    }  # fmt: skip
    files = env.containers.list_container_files("acme", "cntr_1", order="asc").data
    assert [(f["path"], f["bytes"], f["source"], f["object"]) for f in files][0] == (
        "/mnt/data/data.csv", 8, "user", "container.file")
    second = files[1]["path"].removeprefix("/mnt/data/")
    assert len(second) == 32 + 1 + len("data.csv") and second.endswith("-data.csv")
    assert (env.directory() / "data.csv").read_bytes() == b"x,y\n1,2\n"
    assert (env.directory() / second).read_bytes() == b"other"
    assert env.containers.container_file_content("acme", "cntr_1", files[0]["id"]) == (
        "/mnt/data/data.csv", b"x,y\n1,2\n")


def test_an_unknown_or_foreign_file_id_keeps_nothing(env: Env) -> None:
    env.file("other", "file-theirs", "secret.txt", b"not yours")
    env.file("acme", "file-mine", "mine.txt", b"mine")
    for missing in ("file-nope", "file-theirs"):
        with pytest.raises(NotFound) as raised:
            env.container(file_ids=("file-mine", missing))
        assert raised.value.param == "file_ids" and missing in raised.value.message
    assert env.containers.get_container("acme", "cntr_1") is None
    assert not env.directory().exists()


def test_get_list_and_page_per_tenant(env: Env) -> None:
    for i in range(5):
        env.container(cid=f"cntr_{i}", name="even" if i % 2 == 0 else "odd", created_at=T0 + i)
    env.container("other", "cntr_x")
    page = env.containers.list_containers("acme", limit=2)
    assert [c["id"] for c in page.data] == ["cntr_4", "cntr_3"] and page.has_more
    rest = env.containers.list_containers("acme", after=page.last_id, limit=10)
    assert [c["id"] for c in rest.data] == ["cntr_2", "cntr_1", "cntr_0"] and not rest.has_more
    asc = env.containers.list_containers("acme", order="asc", limit=10)
    assert [c["id"] for c in asc.data] == [f"cntr_{i}" for i in range(5)]
    assert [c["id"] for c in env.containers.list_containers("acme", name="odd").data] == ["cntr_3", "cntr_1"]
    assert env.containers.list_containers("acme", after="cntr_nope").data == []
    assert env.containers.get_container("other", "cntr_1") is None
    assert [c["id"] for c in env.containers.list_containers("other").data] == ["cntr_x"]
    with pytest.raises(NotFound):
        env.containers.list_container_files("other", "cntr_1")
    assert env.containers.delete_container("other", "cntr_1") is False
    assert env.containers.get_container("acme", "cntr_1") is not None


def test_delete_removes_rows_and_directory(env: Env) -> None:
    env.container(file_ids=(env.file("acme", "file-a", "a.txt", b"a"),))
    assert env.directory().exists()
    assert env.containers.delete_container("acme", "cntr_1") is True
    assert not env.directory().exists()
    assert env.containers.get_container("acme", "cntr_1") is None
    assert env.containers.delete_container("acme", "cntr_1") is False
    with pytest.raises(NotFound) as raised:
        env.containers.get_container_file("acme", "cntr_1", "cfile_x")
    assert raised.value.param == "container_id"


# -- container files ---------------------------------------------------------------


def test_upload_copy_get_content_and_delete(env: Env) -> None:
    env.container()
    up = env.containers.create_container_file("acme", "cntr_1", name="notes.md", data=b"# notes")
    assert (up["path"], up["bytes"], up["source"], up["container_id"]) == ("/mnt/data/notes.md", 7, "user", "cntr_1")
    env.file("acme", "file-a", "table.csv", b"1,2")
    copied = env.containers.create_container_file("acme", "cntr_1", file_id="file-a")
    assert copied["path"] == "/mnt/data/table.csv"
    assert env.containers.get_container_file("acme", "cntr_1", up["id"]) == up
    assert env.containers.get_container_file("acme", "cntr_1", "cfile_nope") is None
    with pytest.raises(NotFound) as raised:
        env.containers.create_container_file("acme", "cntr_1", file_id="file-nope")
    assert raised.value.param == "file_id"
    assert env.containers.delete_container_file("acme", "cntr_1", up["id"]) is True
    assert not (env.directory() / "notes.md").exists()
    assert env.containers.container_file_content("acme", "cntr_1", up["id"]) is None
    assert env.containers.delete_container_file("acme", "cntr_1", up["id"]) is False
    page = env.containers.list_container_files("acme", "cntr_1")
    assert [f["id"] for f in page.data] == [copied["id"]]


def test_files_page_by_creation(env: Env) -> None:
    env.container()
    made = []
    for i in range(3):
        env.clock.now += 1
        made.append(env.containers.create_container_file("acme", "cntr_1", name=f"f{i}.txt", data=b"x")["id"])
    page = env.containers.list_container_files("acme", "cntr_1", limit=2, order="asc")
    assert [f["id"] for f in page.data] == made[:2] and page.has_more
    rest = env.containers.list_container_files("acme", "cntr_1", after=page.last_id, limit=2, order="asc")
    assert [f["id"] for f in rest.data] == made[2:] and not rest.has_more


# -- expiry and activity ----------------------------------------------------------------


def test_an_idle_container_expires_and_loses_its_files(env: Env) -> None:
    env.container(minutes=1, file_ids=(env.file("acme", "file-a", "a.txt", b"a"),))
    env.clock.now += 59
    assert env.containers.get_container("acme", "cntr_1")["status"] == "running"  # without touch: not activity
    env.clock.now += 1
    found = env.containers.get_container("acme", "cntr_1", touch=True)
    assert found["status"] == "expired" and found["last_active_at"] == int(T0)  # not revived by the touch
    assert not env.directory().exists()
    for call in (
        lambda: env.containers.list_container_files("acme", "cntr_1"),
        lambda: env.containers.create_container_file("acme", "cntr_1", name="b.txt", data=b"b"),
        lambda: env.containers.register_container_files("acme", "cntr_1"),
    ):
        with pytest.raises(InvalidRequest) as raised:
            call()
        assert (raised.value.code, raised.value.param) == ("container_expired", "container_id")
    assert env.containers.touch_container("acme", "cntr_1")["status"] == "expired"
    assert env.containers.container_directory("acme", "cntr_1") is None
    assert [c["status"] for c in env.containers.list_containers("acme").data] == ["expired"]
    assert env.containers.delete_container("acme", "cntr_1") is True


def test_activity_keeps_a_container_running(env: Env) -> None:
    env.container(minutes=1)
    for _ in range(3):
        env.clock.now += 50
        assert env.containers.touch_container("acme", "cntr_1")["status"] == "running"
    env.clock.now += 50
    env.containers.list_container_files("acme", "cntr_1")  # a file operation is activity too
    env.clock.now += 50
    assert env.containers.get_container("acme", "cntr_1")["last_active_at"] == int(T0 + 200)
    assert env.containers.get_container("acme", "cntr_1")["status"] == "running"


def test_the_sweep_expires_every_tenants_idle_containers(env: Env) -> None:
    env.container("acme", "cntr_1", minutes=1)
    env.container("other", "cntr_2", minutes=5)
    env.clock.now += 120
    assert env.containers.expire_containers() == [("acme", "cntr_1")]
    assert not env.directory("cntr_1").exists() and env.directory("cntr_2").exists()
    env.clock.now += 300
    env.container("acme", "cntr_3")  # a create sweeps too
    assert env.containers.get_container("other", "cntr_2")["status"] == "expired"
    assert not env.directory("cntr_2").exists()


# -- files written by code --------------------------------------------------------------


def test_register_finds_new_changed_and_gone_files(env: Env) -> None:
    env.container(file_ids=(env.file("acme", "file-a", "data.csv", b"1,2"),))
    top = env.directory()
    assert env.containers.container_directory("acme", "cntr_1") == str(top)
    (top / "out.txt").write_text("result")
    (top / "plots").mkdir()
    (top / "plots" / "fig.png").write_bytes(b"\x89PNG")
    made = env.containers.register_container_files("acme", "cntr_1")
    assert [(f["path"], f["bytes"], f["source"]) for f in made] == [
        ("/mnt/data/out.txt", 6, "assistant"), ("/mnt/data/plots/fig.png", 4, "assistant")]
    assert env.containers.register_container_files("acme", "cntr_1") == []  # nothing changed since
    (top / "data.csv").write_bytes(b"1,2,3")  # code changed the user's file: same id, now the assistant's
    os.utime(top / "data.csv", ns=(1, 1))
    (top / "out.txt").unlink()
    changed = env.containers.register_container_files("acme", "cntr_1", ["data.csv", "out.txt"])
    original = env.containers.list_container_files("acme", "cntr_1", order="asc").data
    assert [(f["path"], f["bytes"], f["source"]) for f in changed] == [("/mnt/data/data.csv", 5, "assistant")]
    assert changed[0]["id"] == original[0]["id"]
    assert [f["path"] for f in original] == ["/mnt/data/data.csv", "/mnt/data/plots/fig.png"]
    with pytest.raises(StorageError):
        env.containers.register_container_files("acme", "cntr_1", ["../escape.txt"])


def test_links_are_never_files_nor_followed(env: Env, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's secret")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.txt").write_text("outside")
    env.container()
    top = env.directory()
    (top / "link.txt").symlink_to(secret)
    (top / "sub").symlink_to(tmp_path / "outside")
    assert env.containers.register_container_files("acme", "cntr_1") == []
    assert env.containers.register_container_files("acme", "cntr_1", ["link.txt", "sub/x.txt"]) == []
    # A registered file that code swaps for a link reads as gone, not as what the link names.
    (top / "report.txt").write_text("mine")
    [report] = env.containers.register_container_files("acme", "cntr_1")
    (top / "report.txt").unlink()
    (top / "report.txt").symlink_to(secret)
    assert env.containers.container_file_content("acme", "cntr_1", report["id"]) is None
    # An upload under a name code linked elsewhere replaces nothing outside.
    (top / "data.csv").symlink_to(secret)
    made = env.containers.create_container_file("acme", "cntr_1", name="data.csv", data=b"new")
    assert made["path"] != "/mnt/data/data.csv" and secret.read_text() == "the server's secret"


def test_rows_and_files_survive_a_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "t.duckdb")
    env = _open(path)
    env.container(file_ids=(env.file("acme", "file-a", "a.txt", b"abc"),))
    [file] = env.containers.list_container_files("acme", "cntr_1").data
    _close(env)
    again = _open(path)
    try:
        assert again.containers.get_container("acme", "cntr_1")["status"] == "running"
        assert again.containers.container_file_content("acme", "cntr_1", file["id"]) == ("/mnt/data/a.txt", b"abc")
        assert Path(again.containers.container_directory("acme", "cntr_1")) == tmp_path / "t.duckdb.containers" / "cntr_1"
    finally:
        _close(again)


def test_a_store_in_memory_removes_its_directories_when_it_closes() -> None:
    env = _open(None)
    env.container()
    root = Path(env.containers.dirs.root)
    assert (root / "cntr_1").is_dir()
    _close(env)
    assert not root.exists()
