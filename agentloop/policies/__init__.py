"""Pure decisions the workflow makes on proposed calls and on the run: validation,
authorization, approval, budgets, no-progress detection, error classes, completion rules."""
