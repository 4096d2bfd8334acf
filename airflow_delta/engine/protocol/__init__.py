"""Protocol values and codecs: actions, schema, table features and properties, log file names,
columnar helpers, path resolution. No I/O.
"""
