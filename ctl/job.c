/*
 * job.c - see ctl.h.
 */
#include "ctl/ctl.h"
#include "common/file.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

rs_status rs_ctl_find_job(const char *admin_file, const char *url, rs_ctl_job *out, rs_err *err)
{
	memset(out, 0, sizeof(*out));
	if (url) {
		out->url = strdup(url);
		out->token = dup_or_null(getenv("ROWSHIFT_JOIN_TOKEN"));
		out->status_token = dup_or_null(getenv("ROWSHIFT_STATUS_TOKEN"));
		return out->url ? RS_OK : RS_ENOMEM;
	}
	json_t *adm = NULL;
	rs_err why = {0};
	rs_status st = rs_file_read_json(admin_file, 65536, &adm, &why);
	const char *u = json_string_value(json_object_get(adm, "url"));
	const char *t = json_string_value(json_object_get(adm, "token"));
	if (!u || !t) {
		rs_err_set(err, RS_EINVAL, "%s (is a coordinator running?)",
			   st == RS_OK ? "the admin file has no url and token" : why.msg);
		json_decref(adm);
		return RS_EINVAL;
	}
	out->url = strdup(u);
	out->token = strdup(t);
	out->status_token = dup_or_null(json_string_value(json_object_get(adm, "status_token")));
	json_decref(adm);
	return out->url && out->token ? RS_OK : RS_ENOMEM;
}

void rs_ctl_job_free(rs_ctl_job *j)
{
	free(j->url);
	free(j->token);
	free(j->status_token);
	memset(j, 0, sizeof(*j));
}
