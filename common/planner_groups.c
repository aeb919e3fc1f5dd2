/*
 * planner_groups.c - replanning between 2D worlds of the same sharding
 * group S (see planner.h): the number of replica groups R changes, the
 * layout inside a group does not. Role l of a group (the shards local rank
 * l holds) sits on rank l*R + k in group k, so a member that keeps its role
 * keeps its rows, a new group copies every role from an existing group,
 * and removing a group moves nothing.
 */
#include "common/planner.h"

#include <stdlib.h>
#include <string.h>

static int32_t groups_of(const rs_world *w) { return w->ranks / w->sharding_group; }

int rs_planner_same_groups(const rs_plan *prev, const rs_world *world)
{
	return prev && prev->world.sharding_group == world->sharding_group &&
	       (groups_of(&prev->world) > 1 || groups_of(world) > 1);
}

void rs_planner_place_members(int32_t r0, int32_t r1, int32_t s, const int32_t *old_rank, int32_t nsurv, int32_t n,
			      int32_t *out)
{
	char *taken = calloc((size_t)n + 1, 1);
	for (int32_t i = 0; i < n; i++)
		out[i] = -1;
	if (!taken) { /* no room to choose: rank order */
		for (int32_t i = 0; i < n; i++)
			out[i] = i;
		return;
	}
	/* survivors keep their role, in their own group where the new world still has it */
	for (int32_t i = 0; i < nsurv; i++) {
		int32_t l = old_rank[i] / r0, k0 = old_rank[i] % r0;
		if (l >= s)
			continue;
		for (int32_t d = 0; d < r1 && out[i] < 0; d++) {
			int32_t at = l * r1 + (k0 + d) % r1;
			if (at < n && !taken[at])
				taken[out[i] = at] = 1;
		}
	}
	/* then the others, survivors first, in the free ranks in order */
	int32_t next = 0;
	for (int32_t i = 0; i < n; i++) {
		if (out[i] >= 0)
			continue;
		while (next < n && taken[next])
			next++;
		taken[out[i] = next] = 1;
	}
	free(taken);
}

rs_status rs_planner_replicate(const rs_config *cfg, const rs_world *world, const rs_plan *prev,
			       const int32_t *prev_to_new, rs_plan **out, rs_err *err)
{
	int32_t r0 = groups_of(&prev->world), r1 = groups_of(world);
	rs_plan *plan = calloc(1, sizeof(*plan));
	*out = NULL;
	if (!plan)
		return RS_ENOMEM;
	plan->world = *world;
	plan->ntables = cfg->ntables;
	plan->tables = calloc((size_t)cfg->ntables, sizeof(rs_table_plan));
	plan->ranks = calloc((size_t)world->ranks, sizeof(rs_rank_load));
	if (!plan->tables || !plan->ranks)
		goto nomem;
	for (int t = 0; t < cfg->ntables; t++) {
		const rs_table_plan *pt = &prev->tables[t];
		rs_table_plan *tp = &plan->tables[t];
		*tp = (rs_table_plan){.name = strdup(pt->name), .sharding = pt->sharding, .rows = pt->rows, .dim = pt->dim,
				      .row_bytes = pt->row_bytes};
		tp->shards = malloc(sizeof(rs_shard) * ((size_t)pt->nshards / (size_t)r0 * (size_t)r1 + 1));
		if (!tp->name || !tp->shards)
			goto nomem;
		/* group 0's shards, role l = rank / R0, on rank l*R1 + k of every group k */
		for (int i = 0; i < pt->nshards; i++) {
			if (pt->shards[i].replica != 0)
				continue;
			for (int32_t k = 0; k < r1; k++) {
				rs_shard s = pt->shards[i];
				s.rank = s.rank / r0 * r1 + k;
				s.replica = k;
				tp->shards[tp->nshards++] = s;
			}
		}
		rs_plan_sort_shards(tp);
	}
	if (rs_plan_compute_loads(plan, cfg) != RS_OK)
		goto nomem;
	rs_plan_summary *sm = &plan->summary;
	int32_t *held = calloc((size_t)world->sharding_group + 1, sizeof(int32_t));
	if (!held)
		goto nomem;
	for (int32_t r = 0; r < world->ranks; r++)
		sm->max_cost = plan->ranks[r].cost > sm->max_cost ? plan->ranks[r].cost : sm->max_cost;
	/* every role needs R holders: each one missing receives the role's bytes, whoever becomes it */
	for (int32_t r = 0; r < prev->world.ranks; r++)
		if (prev_to_new[r] >= 0 && r / r0 < world->sharding_group)
			held[r / r0]++;
	for (int32_t l = 0; l < world->sharding_group; l++)
		sm->min_moved_bytes += held[l] < r1 ? (uint64_t)(r1 - held[l]) * plan->ranks[l * r1].memory : 0;
	free(held);
	sm->lower_bound = prev->summary.lower_bound > 0 ? prev->summary.lower_bound : sm->max_cost;
	sm->imbalance = sm->lower_bound > 0 ? sm->max_cost / sm->lower_bound : 1.0;
	for (int32_t r = 0; r < world->ranks; r++)
		if (plan->ranks[r].memory > world->memory_per_rank) {
			rs_status st = rs_err_set(err, RS_ENOSPACE,
						  "the tables do not fit: rank %d would hold %llu bytes, memory per rank is %llu", r,
						  (unsigned long long)plan->ranks[r].memory,
						  (unsigned long long)world->memory_per_rank);
			rs_plan_free(plan);
			return st;
		}
	*out = plan;
	return RS_OK;
nomem:
	rs_plan_free(plan);
	return rs_err_set(err, RS_ENOMEM, "planning: out of memory");
}
