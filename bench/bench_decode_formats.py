"""Decoding one executor's blocks of 200-byte records: Confluent-framed Avro and Protobuf against
JSON, in one process with no Kafka and no Spark, so the numbers are the decoders' alone.

Cases, each over the same records (an order of about 200 bytes as JSON, 8 fields):

* ``json`` — :class:`~pipelines.runtime.arrow_records.BlockDecoder` (pyarrow.json over the block);
* ``avro`` — :class:`~pipelines.runtime.arrow_records.FramedBlockDecoder`, writer schema = reader
  schema (fastavro per record, then one ``pa.array`` of the records);
* ``avro-resolved`` — the same, written with an older version (the reader adds a field), so
  fastavro resolves every record;
* ``fastavro-only`` — fastavro's ``schemaless_reader`` over the values and nothing else: the
  floor of any fastavro-based decoder (what is left is building Arrow columns);
* ``protobuf`` — the same records as a Protobuf message (:class:`FramedBlockDecoder` over
  :class:`~pipelines.runtime.protobuf_records.ProtobufValues`: protobuf's C++ parser per record,
  then the message's fields read into a dict);
* ``protobuf-parse-only`` — protobuf's ``FromString`` over the values and nothing else;
* ``spark-from_json``, ``spark-from_avro`` — the alternative of decoding in the JVM: Spark's own
  ``from_json`` and spark-avro's ``from_avro`` (after ``substring`` strips the 5-byte header; one
  reader schema for every record, as ``from_avro`` takes) over the values cached in the JVM, one
  task thread (``local[1]``), written to the noop sink; CPU is the driver's whole process tree.
  spark-avro is fetched by Spark from Maven Central on first use (``spark.jars.packages``);
  ``--no-spark`` leaves both out.

Usage: ``.venv/bin/python bench/bench_decode_formats.py [--records 200000] [--reps 3] [--no-spark]``. Writes
bench/results/decode-formats.json and .md; reports records/s (best of ``--reps``), CPU-seconds per
million records, and each case's ratio to ``json`` measured in the same run.
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import platform
import resource
import sys
import time
from pathlib import Path

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from google.protobuf import message_factory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.result_files import write_results  # noqa: E402
from pipelines.runtime.arrow_records import FramedBlockDecoder, BlockDecoder  # noqa: E402
from pipelines.runtime.avro_records import AvroValues  # noqa: E402
from pipelines.runtime.avro_types import AvroFormat  # noqa: E402
from pipelines.runtime.protobuf_records import ProtobufValues  # noqa: E402
from pipelines.runtime.protobuf_types import ProtobufFormat, compile_schema, message_descriptor  # noqa: E402
from pipelines.runtime.records import RecordFormat  # noqa: E402
from pipelines.runtime.registry_client import RegistrySchemas, RegistrySettings  # noqa: E402

BLOCK = 5000  # records per block, as kafka_range_reader hands them over
FIELDS = [{"name": "order_id", "type": "long"}, {"name": "customer", "type": "string"},
          {"name": "item", "type": "string"}, {"name": "quantity", "type": "int"},
          {"name": "price", "type": "double"}, {"name": "paid", "type": "boolean"},
          {"name": "note", "type": "string"}, {"name": "region", "type": "string"}]
OLD = {"type": "record", "name": "Order", "fields": FIELDS[:-1]}
NEW = {"type": "record", "name": "Order", "fields": FIELDS[:-1] + [{**FIELDS[-1], "default": "eu"}]}
PROTO = """syntax = "proto3";
message Order {
  int64 order_id = 1; string customer = 2; string item = 3; int32 quantity = 4;
  double price = 5; bool paid = 6; string note = 7; string region = 8;
}
"""
JSON_SCHEMA = ("order_id BIGINT, customer STRING, item STRING, quantity INT, price DOUBLE, paid BOOLEAN, "
               "note STRING, region STRING")


class _Registry:
    """The registry's answers for the schema ids (a dict: this measures decoding, not HTTP)."""

    def get_schema(self, schema_id):
        from confluent_kafka.schema_registry import Schema

        if schema_id == 3:
            return Schema(PROTO, "PROTOBUF")
        return Schema(json.dumps({1: OLD, 2: NEW}[schema_id]), "AVRO")


def _record(n: int) -> dict:
    return {"order_id": 10_000_000 + n, "customer": f"customer-{n % 9973:05d}", "item": f"item-{n % 517:04d}",
            "quantity": n % 7 + 1, "price": round(n % 10000 / 7, 2), "paid": n % 3 == 0,
            "note": "deliver to the back door, ring twice " + "x" * (n % 40), "region": "eu-north"}


def _framed(schema: dict, schema_id: int, record: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), {k: v for k, v in record.items()
                                                  if k in {f["name"] for f in schema["fields"]}})
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def _blocks(values: list[bytes]) -> list[pa.Table]:
    ts = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    blocks = []
    for start in range(0, len(values), BLOCK):
        part = values[start:start + BLOCK]
        n = len(part)
        blocks.append(pa.table({
            "key": pa.array([None] * n, pa.binary()), "value": pa.array(part, pa.binary()),
            "topic": pa.array(["orders"] * n), "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(start, start + n), pa.int64()),
            "timestamp": pa.array([ts] * n, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32())}))
    return blocks


def _measure(decode, blocks, reps: int) -> dict:
    best_wall, best_cpu, rows = float("inf"), float("inf"), 0
    for _ in range(reps):
        cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        rows = sum(decode(block) for block in blocks)
        wall, cpu1 = time.perf_counter() - wall0, resource.getrusage(resource.RUSAGE_SELF)
        best_wall = min(best_wall, wall)
        best_cpu = min(best_cpu, (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime))
    return {"rows": rows, "seconds": best_wall, "records_per_s": rows / best_wall,
            "cpu_s_per_million": best_cpu / rows * 1e6}


SPARK_AVRO = "org.apache.spark:spark-avro_2.13:{version}"


def _spark_cases(json_values: list[bytes], avro_values: list[bytes], reps: int) -> dict:
    """``spark-from_json`` and ``spark-from_avro`` (module docstring): the values in a cached JVM
    DataFrame, decoded by one task thread into the noop sink."""
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    from bench.e2e_case import tree_cpu_seconds

    spark = (SparkSession.builder.master("local[1]").appName("bench-decode-formats")
             .config("spark.jars.packages", SPARK_AVRO.format(version=pyspark.__version__))
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")  # the cached local data makes "task of very large size" warnings
    try:
        def frame(values):
            df = spark.createDataFrame([(v,) for v in values], "value BINARY").coalesce(1).cache()
            df.count()
            return df

        json_df, avro_df = frame(json_values), frame(avro_values)
        queries = {
            "spark-from_json": json_df.select(F.from_json(F.col("value").cast("string"), JSON_SCHEMA).alias("r"))
            .select("r.*"),
            "spark-from_avro": avro_df.select(from_avro(F.expr("substring(value, 6, length(value) - 5)"),
                                                        json.dumps(NEW)).alias("r")).select("r.*"),
        }
        out = {}
        for name, query in queries.items():
            best_wall, best_cpu = float("inf"), float("inf")
            for _ in range(reps + 1):  # the first run compiles the plan's code
                cpu0, wall0 = tree_cpu_seconds(), time.perf_counter()
                query.write.format("noop").mode("overwrite").save()
                wall, cpu = time.perf_counter() - wall0, tree_cpu_seconds() - cpu0
                best_wall, best_cpu = min(best_wall, wall), min(best_cpu, cpu)
            rows = len(json_values)
            out[name] = {"rows": rows, "seconds": best_wall, "records_per_s": rows / best_wall,
                         "cpu_s_per_million": best_cpu / rows * 1e6}
        return out
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark from_json / from_avro cases")
    args = parser.parse_args()

    records = [_record(n) for n in range(args.records)]
    json_values = [json.dumps(r, separators=(",", ":")).encode() for r in records]
    avro_values = [_framed(NEW, 2, r) for r in records]
    old_values = [_framed(OLD, 1, r) for r in records]
    settings = RegistrySettings("http://registry.invalid")
    avro_fmt = RecordFormat("avro", None, 1 << 20, framed=AvroFormat(json.dumps(NEW), settings))

    def avro_decoder() -> FramedBlockDecoder:
        return FramedBlockDecoder(avro_fmt, AvroValues(avro_fmt.framed, RegistrySchemas(settings, _Registry())))

    json_decoder = BlockDecoder(RecordFormat("json", JSON_SCHEMA, 1 << 20))
    new_reader, resolved_reader = avro_decoder(), avro_decoder()
    parsed = parse_schema(NEW)

    def fastavro_only(block: pa.Table) -> int:
        for value in block.column("value").to_pylist():
            schemaless_reader(io.BytesIO(value[5:]), parsed, None)
        return block.num_rows

    order_class = message_factory.GetMessageClass(message_descriptor(compile_schema(PROTO), "Order"))
    proto_values = [b"\x00" + (3).to_bytes(4, "big") + b"\x00" + order_class(**r).SerializeToString() for r in records]
    proto_fmt = RecordFormat("protobuf", None, 1 << 20, framed=ProtobufFormat(PROTO, "Order", settings))
    proto_decoder = FramedBlockDecoder(proto_fmt, ProtobufValues(proto_fmt.framed, RegistrySchemas(settings, _Registry())))

    def protobuf_parse_only(block: pa.Table) -> int:
        for value in block.column("value").to_pylist():
            order_class.FromString(value[6:])
        return block.num_rows

    cases = {
        "json": (lambda b: json_decoder.split(b).output.num_rows, _blocks(json_values)),
        "avro": (lambda b: new_reader.split(b).output.num_rows, _blocks(avro_values)),
        "avro-resolved": (lambda b: resolved_reader.split(b).output.num_rows, _blocks(old_values)),
        "fastavro-only": (fastavro_only, _blocks(avro_values)),
        "protobuf": (lambda b: proto_decoder.split(b).output.num_rows, _blocks(proto_values)),
        "protobuf-parse-only": (protobuf_parse_only, _blocks(proto_values)),
    }
    results = {"records": args.records, "reps": args.reps, "block": BLOCK, "python": platform.python_version(),
               "mean_json_bytes": sum(map(len, json_values)) / len(json_values),
               "mean_avro_bytes": sum(map(len, avro_values)) / len(avro_values),
               "mean_protobuf_bytes": sum(map(len, proto_values)) / len(proto_values), "cases": {}}
    for name, (decode, blocks) in cases.items():
        results["cases"][name] = _measure(decode, blocks, args.reps)
        print(f"{name}: {results['cases'][name]['records_per_s']:,.0f} records/s", file=sys.stderr)
    if not args.no_spark:
        for name, row in _spark_cases(json_values, avro_values, args.reps).items():
            results["cases"][name] = row
            print(f"{name}: {row['records_per_s']:,.0f} records/s", file=sys.stderr)
    base = results["cases"]["json"]["records_per_s"]
    lines = [f"Decoding {args.records:,} records of {results['mean_json_bytes']:.0f} B as JSON "
             f"({results['mean_avro_bytes']:.0f} B as Avro, {results['mean_protobuf_bytes']:.0f} B as Protobuf) in blocks of {BLOCK:,}, one process, best of {args.reps}.",
             "", "| case | records/s | CPU s / M records | × json |", "|---|---:|---:|---:|"]
    for name, row in results["cases"].items():
        lines.append(f"| {name} | {row['records_per_s']:,.0f} | {row['cpu_s_per_million']:.2f} | "
                     f"{row['records_per_s'] / base:.2f} |")
    write_results(args.out, "decode-formats", results, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
