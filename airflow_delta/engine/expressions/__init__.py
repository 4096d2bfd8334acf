"""SQL expressions over a table's columns: parsing and evaluation (partition predicates, MERGE
conditions).
"""
