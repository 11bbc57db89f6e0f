"""Per-account totals from a payments topic with Spark and `format("tidegate")`.

    make run                                            # a broker on 127.0.0.1:9092
    .venv/bin/python examples/spark_pipeline.py [BOOTSTRAP] [--master URL]

Writes payments in transactions (one of them aborted), reads them back with Spark
(read_committed: the aborted payments never count), sums the amounts per account with
a Spark aggregation and writes one total per account to a second topic. The bootstrap
server comes from the first argument, else KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092.
Spark runs in-process (local[*]) unless --master names a cluster, for instance a
standalone one: --master spark://127.0.0.1:7077 (docs/spark.md, `make demo-cluster`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import tidegate.spark
from tidegate.client import Admin, NewTopic, Producer


def main() -> None:
    parser = argparse.ArgumentParser(description="per-account totals with Spark")
    parser.add_argument("bootstrap", nargs="?",
                        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    parser.add_argument("--master", default="local[*]", help="Spark master URL")
    args = parser.parse_args()
    bootstrap = args.bootstrap
    run = uuid.uuid4().hex[:8]
    payments, totals = f"payments-{run}", f"account-totals-{run}"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        # replication factor -1: the broker's default.replication.factor (1 on one
        # broker, 3 on `make demo-tidegate-cluster`'s cluster, whose min.insync.replicas
        # of 2 would refuse every write to a topic with a single replica)
        admin.create_topics([NewTopic(payments, 3, replication_factor=-1),
                             NewTopic(totals, 1, replication_factor=-1)])

    expected: dict[str, int] = {}
    with Producer({"bootstrap.servers": bootstrap,
                   "transactional.id": f"payments-writer-{run}"}) as producer:
        producer.init_transactions()
        for batch in range(5):
            producer.begin_transaction()
            for i in range(40):
                account, amount = f"acct-{i % 7}", batch * 10 + i
                producer.send(payments, json.dumps({"account": account, "amount": amount}),
                              key=account)
                if batch != 3:
                    expected[account] = expected.get(account, 0) + amount
            if batch == 3:
                producer.abort_transaction()  # never counted
            else:
                producer.commit_transaction()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(args.master).appName("tidegate-payments")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    tidegate.spark.register(spark)
    try:
        raw = (spark.read.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", payments).load())
        parsed = raw.select(F.from_json(F.col("value").cast("string"),
                                        "account string, amount long").alias("p"))
        sums = parsed.groupBy("p.account").agg(F.sum("p.amount").alias("total"))
        (sums.select(F.col("account").alias("key"),
                     F.to_json(F.struct("account", "total")).alias("value"))
         .write.format("tidegate").mode("append")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", totals).save())

        back = (spark.read.format("tidegate").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", totals).load().collect())
        got = {json.loads(r.value)["account"]: json.loads(r.value)["total"] for r in back}
        for account in sorted(got):
            print(f"{account}: {got[account]}")
        print(f"totals match the committed payments: {got == expected}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
