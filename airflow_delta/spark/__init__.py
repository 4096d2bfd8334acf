"""The Spark data plane: writes data files and collects their AddFiles, reads snapshots, MERGE.

It calls the engine (`airflow_delta.engine`) for every commit; the engine never imports Spark.
"""
