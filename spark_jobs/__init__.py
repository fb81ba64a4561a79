# spark_jobs: PySpark producers and consumers of the broker (docs/architecture.md §9).
# Owns the `amqp` Python Data Source, the local SparkSession settings and the flights pipeline.
# Talks to brokers only over AMQP 0-9-1 (pika); must never import the broker package.
