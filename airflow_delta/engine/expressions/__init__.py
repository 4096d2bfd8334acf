"""SQL expressions over a table's columns: parsing and evaluation (partition predicates, MERGE
conditions).

Read in this order, each module importing only those before it:

- `tokens`: the tokenizer (`tokenize`, `split_conjuncts`, `quote_identifier`);
- `coercion`: Spark's common type of a comparison, literal values as Arrow arrays;
- `tree`: the expression tree and its vectorised evaluation over Arrow;
- `parser`: SQL text to an expression tree, checked against the partition columns;
- `predicates`: `PartitionPredicate`, `parse_predicates` and `TRUE`, evaluated on AddFiles;
- `skipping`: `FilePredicate`, `parse_file_predicates`: predicates over any column, files kept
  unless their statistics prove no row matches (data skipping).
"""
