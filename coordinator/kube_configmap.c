/*
 * kube_configmap.c - ConfigMaps read whole and written fenced on their
 * resourceVersion (kube.h), over rs_kube_object.
 */
#include "coordinator/kube.h"

#include <stdio.h>

rs_status rs_kube_configmap_read(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err)
{
	char path[1024], msg[256];
	long code;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s", rs_kube_namespace(k), name);
	RSCHECK(rs_kube_object(k, "GET", path, NULL, timeout_ms, &code, obj, msg, sizeof(msg), err));
	if (code == 404)
		return RS_ENOTFOUND;
	if (code != 200) {
		json_decref(*obj), *obj = NULL;
		return rs_err_set(err, RS_EIO, "kubernetes: reading configmap %s: HTTP %ld: %s", name, code, msg);
	}
	return *obj ? RS_OK : rs_err_set(err, RS_EINVAL, "kubernetes: configmap %s: not a JSON object", name);
}

rs_status rs_kube_configmap_write(rs_kube *k, const char *name, int timeout_ms, json_t **obj, rs_err *err)
{
	char path[1024], msg[256];
	long code;
	json_t *got;
	int create = !json_object_get(json_object_get(*obj, "metadata"), "resourceVersion");
	snprintf(path, sizeof(path), create ? "/api/v1/namespaces/%s/configmaps" : "/api/v1/namespaces/%s/configmaps/%s",
		 rs_kube_namespace(k), name);
	RSCHECK(rs_kube_object(k, create ? "POST" : "PUT", path, *obj, timeout_ms, &code, &got, msg, sizeof(msg),
			       err));
	if (got) {
		json_decref(*obj);
		*obj = got;
		return RS_OK;
	}
	if (code == 409) /* AlreadyExists, or a resourceVersion not the latest */
		return rs_err_set(err, RS_EABORTED, "kubernetes: configmap %s was written by someone else: %s", name, msg);
	return rs_err_set(err, code / 100 == 4 && code != 429 ? RS_EINVAL : RS_EIO, "kubernetes: writing configmap %s: "
			  "HTTP %ld: %s", name, code, code / 100 == 2 ? "the answer is not an object" : msg);
}
