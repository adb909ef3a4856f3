"""The ticket-triage workflow's own code: the ``crm.lookup`` tool (``tools.lookup``)."""
