"""The inbox's visibility queries quote a searched-for value one way, agentloop.search's: a
value no query can say as written is never searched for as another."""

from __future__ import annotations

from agentloop.runtime.waiting_memos import tenant_clause, waiting_query


def test_a_tenant_no_query_can_name_is_not_searched_for_as_another() -> None:
    # The quote-stripping quoting it replaces searched for tenant 'ab' here.
    assert tenant_clause(["a'b"]) == " AND WorkflowId = ''"
    assert tenant_clause(["a'b", "acme"]) == " AND (AgentTenant = 'acme')"
    assert tenant_clause(None) == ""
    assert tenant_clause([]) == " AND WorkflowId = ''"


def test_the_waiting_query_names_each_waiting_phase() -> None:
    query = waiting_query(["acme"])
    assert query.startswith("WorkflowType = 'AgentRun' AND ExecutionStatus = 'Running' AND (")
    assert "AgentPhase = 'awaiting_approval'" in query and query.endswith("(AgentTenant = 'acme')")
