"""SQL expressions over a table's columns: parsing and evaluation (partition predicates, MERGE
conditions, UPDATE assignments).

Read in this order, each module importing only those before it:

- `tokens`: the tokenizer (`tokenize`, `split_conjuncts`, `quote_identifier`);
- `coercion`: Spark's common type of a comparison, literal values as Arrow arrays;
- `tree`: the expression tree and its vectorised evaluation over Arrow;
- `casts`: SQL CAST between Arrow types, as Spark casts with ANSI mode off;
- `values`: value expressions (arithmetic, CAST, CASE/IF/COALESCE, functions), typed and
  evaluated as Spark SQL with ANSI mode off;
- `parser`: SQL text to an expression tree, checked against the partition columns;
- `predicates`: `PartitionPredicate`, `parse_predicates` and `TRUE`, evaluated on AddFiles;
- `skipping`: `FilePredicate`, `parse_file_predicates`: predicates over any column, files kept
  unless their statistics prove no row matches (data skipping);
- `generated`: generated columns (`delta.generationExpression`) computed where a row gives
  none and checked where it gives one, as delta-spark does.
"""
