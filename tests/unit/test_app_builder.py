"""The RayService entry point builds the same application as `troupe serve`, from a config file."""

from __future__ import annotations

from ray import serve

from troupe.serve.deployment import app_builder


def test_app_builder_reads_the_config_named_in_args(tmp_path):
    config = tmp_path / "troupe.toml"
    config.write_text('[runtime]\nplacement = "dedicated"\n[server]\nmax_ongoing_requests = 321\n')
    app = app_builder({"config": str(config)})
    assert isinstance(app, serve.Application)
    _, runtime = app._bound_deployment.init_args
    assert runtime.placement == "dedicated"
    assert app._bound_deployment._deployment_config.max_ongoing_requests == 321


def test_app_builder_without_args_uses_the_embedded_defaults():
    server, runtime = app_builder({})._bound_deployment.init_args
    assert (server.port, [m.name for m in runtime.models]) == (8000, ["sim"])


def test_max_replicas_per_node_reaches_serve_only_when_set(tmp_path):
    config = tmp_path / "troupe.toml"
    config.write_text("[server]\nnum_replicas = 2\nmax_replicas_per_node = 1\n")
    spread = app_builder({"config": str(config)})._bound_deployment
    assert spread._replica_config.max_replicas_per_node == 1
    assert app_builder({})._bound_deployment._replica_config.max_replicas_per_node is None


def test_troupe_serve_refuses_more_replicas_than_a_local_instance_can_place(tmp_path):
    """A local Ray instance is one node: two replicas at most one per node would never both
    start. `troupe serve` says so and exits before it starts Ray."""
    from click.testing import CliRunner

    from troupe.cli import cli

    config = tmp_path / "troupe.toml"
    config.write_text("[server]\nnum_replicas = 2\nmax_replicas_per_node = 1\n")
    result = CliRunner().invoke(cli, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert "max_replicas_per_node = 1 leaves 1 of num_replicas = 2 without a node" in result.output
