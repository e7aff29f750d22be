//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package deliver

// alive cannot peek at a connection here: an idle connection the server
// closed is found when it is used, and that attempt fails as a connection
// failure, as it would through the Transport when the server closes the
// connection just as a request goes out on it.
func (c *conn1) alive() bool { return true }

// peeks says whether alive can tell an idle connection the server closed.
const peeks = false
