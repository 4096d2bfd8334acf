"""Commands on a table: the data file writer and reader, MERGE, VACUUM."""
