"""`scg` — the command line of spark-consumer-groups.

Exit codes: 0 success, 1 runtime failure, 2 bad configuration or arguments (with file, line and
field), 3 environment problem (Java, ports, missing install), 130 interrupted. Every failure is an
:class:`~groupmgr.core.ScgError`: the CLI prints its one-line headline (``[CONDITION] ...``) and
exits with its ``exit_category``; the mapping is by type, never by message text.
"""
from __future__ import annotations

import argparse
import json
import sys

from groupmgr.core import ExitCategory, ScgError
from pipelines.cli.arguments import ArgumentParser, positive_int, tcp_port
from pipelines.runtime.install_paths import package_version

EXIT_OK, EXIT_INTERRUPTED = 0, 130


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="scg", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a pipeline as one member of its consumer group")
    run.add_argument("file")
    run.add_argument("--log-format", choices=("text", "json"), default=None,
                     help="one event per line as text (default) or JSON; also SCG_LOG_FORMAT")
    validate = sub.add_parser("validate", help="validate pipeline files and exit (2 if any is invalid); "
                                               "every problem of a file is a line")
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument("--print", action="store_true", dest="print_yaml",
                          help="print each valid file's resolved config as YAML (defaults filled in, "
                               "secrets masked as ***)")
    demo = sub.add_parser("demo", help="the main job end to end on an embedded local Kafka")
    demo.add_argument("--records", type=positive_int, default=20000)
    demo.add_argument("--partitions", type=positive_int, default=6)
    kafka = sub.add_parser("kafka", help="a local Apache Kafka (KRaft) on loopback")
    kafka.add_argument("action", choices=["start", "stop", "status"])
    kafka.add_argument("--brokers", type=positive_int, default=1)
    kafka.add_argument("--port", type=tcp_port, default=9092,
                       help="first client port (default 9092; node i uses port+i)")
    kafka.add_argument("--dir", default=None, help="state directory (default .scg/state/kafka)")
    kafka.add_argument("--secure", action="store_true",
                       help="SASL_SSL (SCRAM-SHA-512) on port+i and mutual TLS on port+brokers+i, "
                            "ACLs enforced; prints the client settings for a pipeline file")
    kafka.add_argument("--schema-registry", action="store_true",
                       help="start: also a Confluent-compatible schema registry (Apicurio, Java 21+); "
                            "its URL is printed before the bootstrap servers; stop ends it too")
    assign = sub.add_parser("assign", help="preview what an assignor would give a group")
    assign.add_argument("--assignor", required=True)
    assign.add_argument("--topic", action="append", required=True, metavar="NAME:PARTITIONS")
    assign.add_argument("--member", action="append", required=True,
                        metavar="ID[=INSTANCE][:TOPIC,...]")
    describe = sub.add_parser("describe", help="show a group's members, offsets and lag")
    describe.add_argument("group", nargs="?")
    describe.add_argument("--bootstrap", default="127.0.0.1:9092")
    describe.add_argument("--config", metavar="FILE",
                          help="reach the brokers as this pipeline file's kafka section says (security too)")
    describe.add_argument("--pipeline", help="describe the group and table of a pipeline file")
    describe.add_argument("--json", action="store_true")
    check = sub.add_parser("check", help="try a pipeline's Kafka security, ACLs and storage without Spark; "
                                         "a line per check, exit 1 if any failed")
    check.add_argument("file")
    offsets = sub.add_parser("offsets", help="show or reset a pipeline's offsets (both tables and the group)")
    offsets.add_argument("file")
    actions = offsets.add_subparsers(dest="action", required=True, prog="scg offsets FILE")
    actions.add_parser("show", help="per partition: the tables', the group's and the log's offsets, lag") \
        .add_argument("--json", action="store_true")
    reset = actions.add_parser("reset", help="move the tables' and the group's offsets")
    reset.add_argument("--to", required=True, metavar="earliest|latest|OFFSET|ISO-8601-TIME")
    reset.add_argument("--partitions", metavar="TOPIC:PARTITION[,...]", help="only these (default: all)")
    reset.add_argument("--dry-run", action="store_true", help="print the moves, write nothing")
    reset.add_argument("--force", action="store_true",
                       help="even while the group has members: fence them, remove them from the group")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``scg`` command; returns the process exit code."""
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ScgError as exc:
        where = f" (details: {exc.details})" if exc.details else ""
        print(f"scg: error: {exc.headline()}{where}", file=sys.stderr)
        return int(exc.exit_category)


def cmd_run(args) -> int:
    from pipelines.cli.run_member import run_pipeline
    from pipelines.config import load_pipeline

    from pipelines.cli.log_setup import configure_logging, log_format
    from pipelines.runtime.metrics import member_label

    fmt = log_format(args.log_format)
    config = load_pipeline(args.file)
    configure_logging(fmt, config.name, member_label(config.group.instance_id))
    run_pipeline(config, out=None)
    return EXIT_OK


def cmd_validate(args) -> int:
    from pipelines.config import main_validate

    # every file checked, each one reported
    return max([main_validate(path, print_yaml=args.print_yaml) for path in args.files])


def cmd_demo(args) -> int:
    from pipelines.local.demo import run_demo

    return run_demo(records=args.records, partitions=args.partitions)


def cmd_kafka(args) -> int:
    from pathlib import Path

    from pipelines.local.local_kafka import LocalKafka
    from pipelines.runtime.install_paths import state_dir

    root = Path(args.dir) if args.dir else state_dir() / "kafka"
    cluster = LocalKafka(root)
    registry_dir = root / "schema-registry"
    if args.action == "start":
        registry = _prepare_registry(registry_dir, _note) if args.schema_registry else None
        state = cluster.start(brokers=args.brokers, port=args.port, secure=args.secure,
                              grant_client_all=args.secure, progress=_note)
        if registry is not None:
            _start_registry(registry, cluster, _note)
        if state.security:
            _print_secure_settings(state.security)
        if registry is not None:
            print("schema registry ready; Confluent-compatible URL:", file=sys.stderr)
            print(registry.url)
        print(f"Kafka {len(state.nodes)} broker(s) ready; bootstrap servers:", file=sys.stderr)
        print(state.bootstrap_servers)
    elif args.action == "stop":
        stopped = cluster.stop()
        print(f"stopped {stopped} Kafka process(es)" if stopped else "no local Kafka was running")
        registry = _recorded_registry(registry_dir)
        if registry is not None:
            was_running = registry.running()
            registry.stop()
            if was_running:
                print(f"stopped the schema registry ({registry.url})")
    else:
        state = cluster.status()
        alive = state.alive_nodes() if state else []
        registry = _recorded_registry(registry_dir)
        if registry is not None:
            shown = "" if registry.running() else " not running"
            print(f"schema registry: pid {registry.pid}{shown} {registry.url} log {registry.log_file}")
        if not alive:
            print("no local Kafka running")
            return int(ExitCategory.RUNTIME)
        for node in alive:
            mtls = f" (SASL_SSL), 127.0.0.1:{node.mtls_port} (mutual TLS)" if node.mtls_port else ""
            print(f"node {node.node_id}: pid {node.pid} 127.0.0.1:{node.client_port}{mtls} "
                  f"log {node.log_file}")
        print(state.bootstrap_servers)
    return EXIT_OK


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def _recorded_registry(workdir):
    from pipelines.local.schema_registry import SchemaRegistry

    return SchemaRegistry.attach(workdir)


def _prepare_registry(workdir, progress):
    """The registry to start, its Java 21+ and distribution found first: a machine that cannot run
    one fails before Kafka starts."""
    from pipelines.local.schema_registry import SchemaRegistry, distribution_dir, find_java

    java, distribution = find_java(), distribution_dir(progress)
    return SchemaRegistry(workdir, java=java, distribution=distribution, progress=progress)


def _start_registry(registry, cluster, progress) -> None:
    """Starts the registry detached (it outlives this command), once Kafka started (so no cluster
    of this directory ran: a registry left from one is stopped); Kafka is stopped when it fails."""
    left = _recorded_registry(registry.workdir)
    if left is not None:
        left.stop()
    progress("starting the schema registry (Apicurio Registry)")
    try:
        registry.start().detach()
    except BaseException:
        registry.stop()
        cluster.stop()
        raise


def _print_secure_settings(security) -> None:
    """The ``kafka:`` sections a pipeline file needs for each listener (secret files, not secrets)."""
    import yaml

    listeners = (("sasl_ssl", f"SCRAM-SHA-512 over TLS as user {security.client_username}"),
                 ("mtls", f"mutual TLS as {security.client_principal} (the client certificate)"))
    for listener, what in listeners:
        print(f"# {what}:")
        print(yaml.safe_dump({"kafka": security.pipeline_kafka(listener)}, sort_keys=False), end="")
    print(f"# {security.client_principal} may use every topic and group (ACLs granted at start). "
          f"Super user {security.admin_username}: password in {security.admin_password_file}.")


def cmd_assign(args) -> int:
    from groupmgr.assignors.preview import preview

    print(json.dumps(preview(args.assignor, args.topic, args.member), indent=2, sort_keys=True))
    return EXIT_OK


def cmd_describe(args) -> int:
    from pipelines.cli.describe_pipeline import describe_command

    return describe_command(args)


def cmd_check(args) -> int:
    from pipelines.cli.check_command import check_command

    return check_command(args)


def cmd_offsets(args) -> int:
    from pipelines.cli.offsets_command import offsets_command

    return offsets_command(args)


COMMANDS = {"run": cmd_run, "validate": cmd_validate, "demo": cmd_demo, "kafka": cmd_kafka,
            "assign": cmd_assign, "describe": cmd_describe, "offsets": cmd_offsets,
            "check": cmd_check}
