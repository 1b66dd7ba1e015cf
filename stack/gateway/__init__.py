"""The resilient gateway in front of the engines (see ``app``)."""
