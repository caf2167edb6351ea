"""The scheduler extender: filter, prioritize, bind over HTTP; state from the API; leader election."""
