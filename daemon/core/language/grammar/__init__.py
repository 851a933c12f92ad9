"""The rule grammar of the query language, one module per operation.

``daemon.parser`` runs these recognizers in order and turns what they read
into a ParsedQuery with a confidence; docs/query-language.md lists the forms.
"""
