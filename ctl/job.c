/*
 * job.c - see ctl.h.
 */
#include "ctl/ctl.h"
#include "common/control.h"
#include "common/file.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* The one local job's admin file in this user's private directory (job-PORT.json): RS_EINVAL when none or several. */
static rs_status find_admin_file(char *out, size_t n, rs_err *err)
{
	char dir[4000];
	int count = 0;
	RSCHECK(rs_file_private_dir("rowshift", dir, sizeof(dir), err));
	DIR *d = opendir(dir);
	if (!d)
		return rs_err_set(err, RS_EIO, "%s: %s", dir, strerror(errno));
	for (struct dirent *e; (e = readdir(d));) {
		size_t len = strlen(e->d_name);
		if (strncmp(e->d_name, "job-", 4) != 0 || len < 9 || strcmp(e->d_name + len - 5, ".json") != 0)
			continue;
		if (count++ == 0)
			snprintf(out, n, "%s/%s", dir, e->d_name);
	}
	closedir(d);
	if (count == 0)
		return rs_err_set(err, RS_EINVAL, "no local job in %s (is a coordinator running?)", dir);
	if (count > 1)
		return rs_err_set(err, RS_EINVAL, "%d local jobs in %s: name one with --admin-file (or --coordinator)", count,
				  dir);
	return RS_OK;
}

rs_status rs_ctl_find_job(const char *admin_file, const char *url, rs_ctl_job *out, rs_err *err)
{
	memset(out, 0, sizeof(*out));
	const char *ca = getenv("ROWSHIFT_TLS_CA"); /* for a wss:// URL: the user's word first, then the job's */
	if (url) {
		RSCHECK(rs_control_set_tls_ca(ca, err));
		out->url = strdup(url);
		out->token = dup_or_null(getenv("ROWSHIFT_JOIN_TOKEN"));
		out->status_token = dup_or_null(getenv("ROWSHIFT_STATUS_TOKEN"));
		return out->url ? RS_OK : RS_ENOMEM;
	}
	char found[4096];
	if (!admin_file)
		RSCHECK(find_admin_file(found, sizeof(found), err));
	json_t *adm = NULL;
	rs_err why = {0};
	rs_status st = rs_file_read_json(admin_file ? admin_file : found, 65536, &adm, &why);
	const char *u = json_string_value(json_object_get(adm, "url"));
	const char *t = json_string_value(json_object_get(adm, "token"));
	if (!u || !t) {
		rs_err_set(err, RS_EINVAL, "%s (is a coordinator running?)",
			   st == RS_OK ? "the admin file has no url and token" : why.msg);
		json_decref(adm);
		return RS_EINVAL;
	}
	st = rs_control_set_tls_ca(ca && *ca ? ca : json_string_value(json_object_get(adm, "tls_ca")), err);
	if (st != RS_OK) {
		json_decref(adm);
		return st;
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
